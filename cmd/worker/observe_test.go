package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
)

// syncBuffer is a bytes.Buffer safe to read while a process writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// metricValue finds a sample line "name value" in Prometheus text output.
func metricValue(t *testing.T, text, name string) float64 {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, name+" ") {
			var v float64
			if _, err := fmt.Sscanf(line[len(name)+1:], "%g", &v); err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("metric %s not found in:\n%s", name, text)
	return 0
}

func TestMetricsReadinessAndJSONLogEvents(t *testing.T) {
	t.Parallel()
	c := cli{t, pgtest.NewURL(t)}
	c.mustRun("load", "--tiers", vectors+"tiers.csv", "--records", vectors+"records.csv")
	db := pgtest.Open(t, c.dsn, dbconn.Options{})

	cmd := c.command("run", "--id", "observed", "--metrics-addr", "127.0.0.1:0", "--log-format", "json",
		"--log-level", "debug", "--heartbeat", "100ms", "--stale-after", "1s", "--batch-size", "100")
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	// The metrics address and the end of the work, both read as they come.
	var addr string
	deadline := time.Now().Add(60 * time.Second)
	for {
		if addr == "" {
			for _, line := range strings.Split(logs.String(), "\n") {
				var e struct {
					Msg  string `json:"msg"`
					Addr string `json:"addr"`
				}
				if json.Unmarshal([]byte(line), &e) == nil && e.Msg == "serving metrics" {
					addr = e.Addr
				}
			}
		}
		var pending int64
		if err := db.QueryRow(`SELECT coalesce(sum(available - position), 1) FROM baton.tasks`).Scan(&pending); err != nil {
			t.Fatal(err)
		}
		if addr != "" && pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker did not finish (addr %q):\n%s", addr, logs.String())
		}
		time.Sleep(20 * time.Millisecond) // polling the database for a moment to act on
	}
	base := "http://" + addr
	if code, _ := get(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d", code)
	}
	if code, body := get(t, base+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz = %d %s", code, body)
	}
	// The work can finish before the first periodic heartbeat (the
	// registration at start is not counted): wait for one, the worker keeps
	// renewing its registration while idle.
	var text string
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		_, text = get(t, base+"/metrics")
		// The last release follows the last commit: all records priced
		// does not mean all contracts handed back yet.
		released := strings.Contains(text, `baton_releases_total{reason="caught_up"} `) &&
			metricValue(t, text, `baton_releases_total{reason="caught_up"}`) >= 12
		if metricValue(t, text, `baton_heartbeats_total{result="ok"}`) >= 1 && released || time.Since(start) > 30*time.Second {
			break
		}
	}
	if got := metricValue(t, text, "baton_records_processed_total"); got != 3544 {
		t.Errorf("baton_records_processed_total = %v, want 3544", got)
	}
	if got := metricValue(t, text, `baton_claims_total{result="won"}`); got < 12 {
		t.Errorf("claims won = %v, want ≥ 12", got)
	}
	if got := metricValue(t, text, `baton_releases_total{reason="caught_up"}`); got < 12 {
		t.Errorf("caught-up releases = %v, want ≥ 12", got)
	}
	if got := metricValue(t, text, `baton_heartbeats_total{result="ok"}`); got < 1 {
		t.Errorf("heartbeats ok = %v", got)
	}
	if got := metricValue(t, text, "baton_batch_commit_seconds_count"); got < 36 {
		t.Errorf("batch commit histogram count = %v, want ≥ 36 (3544 records in batches of ≤ 100)", got)
	}
	if !strings.Contains(text, `baton_partitions_held{state="active"}`) {
		t.Error("no held-partitions gauge")
	}

	// A schema that falls behind makes the worker unready.
	if _, err := db.Exec(`DELETE FROM baton.pricing_migrations`); err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, base+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "schema") {
		t.Fatalf("/readyz with an outdated schema = %d %q, want 503 naming the schema", code, body)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("worker exit: %v", err)
	}

	// Every protocol log line is JSON with the stable event fields.
	seen := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var e map[string]any
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		ev, _ := e["event"].(string)
		switch ev {
		case "claimed", "checkpoint", "released", "confirmed", "lost", "fenced", "failed":
			for _, field := range []string{"contract_id", "version", "worker"} {
				if _, ok := e[field]; !ok {
					t.Errorf("%s event lacks %q: %s", ev, field, line)
				}
			}
			if w, _ := e["worker"].(string); !strings.HasPrefix(w, "observed#") {
				t.Errorf("worker field %q does not name the instance", w)
			}
		}
		seen[ev]++
	}
	for _, ev := range []string{"claimed", "checkpoint", "released"} {
		if seen[ev] == 0 {
			t.Errorf("no %q events logged", ev)
		}
	}
}

func TestProbe(t *testing.T) {
	t.Parallel()
	ok := http.NewServeMux()
	ok.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ready") })
	ok.HandleFunc("/down", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "not ready: schema", http.StatusServiceUnavailable)
	})
	srv := httptest.NewServer(ok)
	defer srv.Close()
	c := cli{t, ""}
	if _, _, code := c.run("probe", srv.URL+"/readyz"); code != 0 {
		t.Fatalf("probe of a ready endpoint exited %d", code)
	}
	if _, errs, code := c.run("probe", srv.URL+"/down"); code == 0 || !strings.Contains(errs, "503") {
		t.Fatalf("probe of an unready endpoint exited %d: %q", code, errs)
	}
}
