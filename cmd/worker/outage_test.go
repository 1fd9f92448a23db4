package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/pglocal"
)

// ownServer starts a PostgreSQL server of the test's own, to stop and
// restart.
func ownServer(t *testing.T) *pglocal.Server {
	t.Helper()
	if _, err := pglocal.BinDir(); err != nil {
		t.Skipf("needs the PostgreSQL server binaries: %v", err)
	}
	base, err := os.MkdirTemp("", "baton-own-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	srv, err := pglocal.Start(context.Background(), pglocal.Options{Dir: filepath.Join(base, "data")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop(pglocal.Immediate) })
	return srv
}

// logLines parses JSON log lines.
func logLines(t *testing.T, text string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", sc.Text())
		}
		out = append(out, m)
	}
	return out
}

func waitLog(t *testing.T, logs *syncBuffer, done <-chan error, what string, ok func(string) bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !ok(logs.String()) {
		select {
		case err := <-done:
			t.Fatalf("worker exited (%v) while waiting for %s:\n%s", err, what, logs)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s:\n%s", what, logs)
		}
		time.Sleep(20 * time.Millisecond) // polling the log: the process gives no other signal
	}
}

// A worker started while the database is down waits for it (saying so
// once); a database outage while it holds contracts gives one WARN line
// and one "reachable again" line, not a line per contract and retry, no
// ERROR, and no note of the refused TLS attempt.
func TestRunWaitsForTheDatabaseAndLogsAnOutageOnce(t *testing.T) {
	t.Parallel()
	srv := ownServer(t)
	// Without sslmode, pgx tries TLS first (sslmode=prefer), which this
	// server refuses.
	c := cli{t, strings.Replace(srv.URL("postgres"), "sslmode=disable", "", 1)}
	c.mustRun("migrate")
	c.mustRun("seed", "--contracts", "8", "--records-per-contract", "5000", "--dir", t.TempDir(), "--load")
	srv.Stop(pglocal.Fast)

	cmd := c.command("run", "--until-done", "--heartbeat", "100ms", "--stale-after", "1s", "--batch-size", "10",
		"--log-format", "json", "--log-level", "debug", "--wait-for-database", "2m")
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	waitLog(t, logs, done, "the wait at start", func(s string) bool { return strings.Contains(s, "database not ready, waiting for it") })
	if err := srv.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitLog(t, logs, done, "a checkpoint", func(s string) bool { return strings.Contains(s, `"event":"checkpoint"`) })
	stopAt := time.Now()
	srv.Stop(pglocal.Fast)
	// The held contracts are given up: their leases end locally, or their
	// batches fail and are left to expire.
	waitLog(t, logs, done, "contracts given up in the outage", func(s string) bool {
		return strings.Contains(s, "lease expired locally") || strings.Contains(s, "the lease will expire")
	})
	if err := srv.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	backAt := time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("worker: %v\n%s", err, logs)
		}
	case <-time.After(120 * time.Second):
		t.Fatalf("worker did not finish after the outage:\n%s", logs)
	}
	var warns, unreachable, reachable, waiting []string
	// The episodes (from an unreachable line to the reachable line after
	// it) that overlap the time the server was down.
	inOutage := 0
	var warnsDown []string // WARN lines logged while the server was down
	var episodeFrom time.Time
	lineTime := func(m map[string]any) time.Time {
		at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(m["time"]))
		if err != nil {
			t.Fatalf("log line without a time: %v", m)
		}
		return at
	}
	down := false // the outage lines must alternate: down, back, down, back
	for _, m := range logLines(t, logs.String()) {
		line, _ := json.Marshal(m)
		switch m["level"] {
		case "ERROR":
			t.Errorf("ERROR line for an outage: %s", line)
		case "WARN":
			warns = append(warns, string(line))
			if at := lineTime(m); !at.Before(stopAt) && !at.After(backAt) {
				warnsDown = append(warnsDown, string(line))
			}
		}
		switch m["msg"] {
		case "database unreachable, retrying (until it is back, what follows from it is logged at debug)":
			if down {
				t.Errorf("a second unreachable line within one outage: %s", line)
			}
			down = true
			unreachable = append(unreachable, string(line))
			episodeFrom = lineTime(m)
		case "database reachable again":
			if !down {
				t.Errorf("reachable again without an outage: %s", line)
			}
			down = false
			reachable = append(reachable, string(line))
			if !episodeFrom.After(backAt) && !lineTime(m).Before(stopAt) {
				inOutage++
			}
		case "database not ready, waiting for it":
			waiting = append(waiting, string(line))
		}
	}
	// One outage was caused; on a loaded machine a statement or heartbeat
	// starved of CPU can also time out, before the outage or right after
	// the restart, each a real episode of its own for the worker, which
	// cannot tell the two apart (seen at load averages of 5 to 10 on 2
	// cores): each is again one line down and one line back (checked
	// above, line by line), never a line per contract or statement.
	// The time the server was down lies in exactly one episode (one that
	// a starved statement began just before the stop counts).
	if len(waiting) != 1 || inOutage != 1 || len(reachable) != len(unreachable) {
		t.Fatalf("want one wait, one episode (unreachable, then reachable) over the time the server was down, and one reachable line per unreachable one (the outage caused, and one per timeout of a starved statement), got %d, %d (%d over the outage), %d:\n%s",
			len(waiting), len(unreachable), inOutage, len(reachable), strings.Join(warns, "\n"))
	}
	// While the server was down: the outage's line, and the fenced commit
	// or claim round that races the first failed heartbeat may add one
	// each. (Before and after it, a starved machine adds warnings of its
	// own: a batch whose idle transaction the server ended is one, retried.)
	if len(warnsDown) > 3 {
		t.Fatalf("%d WARN lines while the server was down:\n%s\n\nfull log:\n%s", len(warnsDown), strings.Join(warnsDown, "\n"), logs)
	}
	if strings.Contains(logs.String(), "tls error") {
		t.Fatalf("TLS fallback noise in the logs:\n%s", logs)
	}
	t.Logf("WARN lines:\n%s\n%s", strings.Join(warns, "\n"), reachable[0])
}

// SIGTERM while waiting for the database at start is a graceful stop.
func TestRunStoppedWhileWaitingExitsZero(t *testing.T) {
	t.Parallel()
	c := cli{t, "postgres://baton@127.0.0.1:1/nowhere?connect_timeout=1"}
	cmd := c.command("run", "--wait-for-database", "1h")
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	waitLog(t, logs, done, "the wait", func(s string) bool { return strings.Contains(s, "database not ready, waiting for it") })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("SIGTERM while waiting: %v\n%s", err, logs)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit after SIGTERM:\n%s", logs)
	}
}
