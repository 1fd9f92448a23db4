package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/batonhq/baton/internal/pglocal"
)

// tmux drives a terminal of a fixed size on a private server socket.
type tmux struct {
	t      *testing.T
	socket string
}

func (m tmux) cmd(args ...string) (string, error) {
	out, err := exec.Command("tmux", append([]string{"-L", m.socket}, args...)...).CombinedOutput()
	return string(out), err
}

func (m tmux) must(args ...string) string {
	m.t.Helper()
	out, err := m.cmd(args...)
	if err != nil {
		m.t.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// waitScreen captures the pane until ok accepts it, and returns it.
func (m tmux) waitScreen(what string, ok func(string) bool) string {
	m.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var screen string
	for time.Now().Before(deadline) {
		if _, err := m.cmd("has-session", "-t", "w"); err != nil {
			m.t.Fatalf("status --watch exited while waiting for %s; last screen:\n%s", what, screen)
		}
		screen = m.must("capture-pane", "-p", "-t", "w")
		if ok(screen) {
			return screen
		}
		time.Sleep(50 * time.Millisecond) // polling the terminal: it has no other signal
	}
	m.t.Fatalf("timed out waiting for %s; screen:\n%s", what, screen)
	return ""
}

// checkClean fails unless the screen shows one header, rows that did not
// wrap, and an "N more" line, within 80×24.
func checkClean(t *testing.T, screen string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(screen, "\n"), "\n")
	if len(lines) > 24 {
		t.Fatalf("%d lines on a 24-line terminal:\n%s", len(lines), screen)
	}
	for _, l := range lines {
		if n := utf8.RuneCountInString(l); n > 80 {
			t.Fatalf("line of %d characters on an 80-column terminal: %q", n, l)
		}
	}
	if n := strings.Count(screen, "CONTRACT"); n != 1 {
		t.Fatalf("%d header lines, want 1:\n%s", n, screen)
	}
	if n := strings.Count(screen, "priced"); n != 1 {
		t.Fatalf("%d progress lines, want 1:\n%s", n, screen)
	}
	rows := 0
	for _, l := range lines {
		if strings.HasPrefix(l, "  x") {
			rows++
			if !strings.HasSuffix(strings.TrimRight(l, " "), "left") || !strings.Contains(l, "…") {
				t.Fatalf("contract row wrapped or id not cut: %q\n%s", l, screen)
			}
		}
	}
	if rows == 0 || !strings.Contains(screen, fmt.Sprintf("… %d more contracts", 40-rows)) {
		t.Fatalf("%d rows shown, want an exact \"N more\" line:\n%s", rows, screen)
	}
}

// status --watch in an 80×24 terminal with 64-character contract ids keeps a
// clean screen, and keeps running through a database restart.
func TestWatchFitsTheTerminalAndSurvivesARestart(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatal("this test needs tmux (apt-get install tmux)")
	}
	if _, err := pglocal.BinDir(); err != nil {
		t.Skipf("needs the PostgreSQL server binaries to restart a server of its own: %v", err)
	}
	// A server of the test's own, to restart.
	base, err := os.MkdirTemp("", "baton-watch-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	srv, err := pglocal.Start(ctx, pglocal.Options{Dir: filepath.Join(base, "data")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop(pglocal.Immediate) })
	c := cli{t, srv.URL("postgres")}
	c.mustRun("migrate")
	var tiers, records strings.Builder
	tiers.WriteString("contract_id,threshold_minor,discount_bp\n")
	records.WriteString("contract_id,record_id,amount_minor\n")
	for i := range 40 {
		id := fmt.Sprintf("%s-%02d", strings.Repeat("x", 61), i)
		fmt.Fprintf(&tiers, "%s,0,100\n", id)
		for j := range i + 1 {
			fmt.Fprintf(&records, "%s,r%d,100\n", id, j)
		}
	}
	c.mustRun("load", "--tiers", writeFile(t, "tiers.csv", tiers.String()), "--records", writeFile(t, "records.csv", records.String()))

	m := tmux{t, fmt.Sprintf("baton-watch-%d", os.Getpid())}
	t.Cleanup(func() { _, _ = m.cmd("kill-server") })
	command := fmt.Sprintf("env BATON_RUN_AS_WORKER=1 DATABASE_URL=%s TERM=xterm %s status --watch --interval 200ms 2>&1",
		c.dsn, os.Args[0])
	m.must("-f", "/dev/null", "new-session", "-d", "-s", "w", "-x", "80", "-y", "24", command)

	screen := m.waitScreen("the first view", func(s string) bool { return strings.Contains(s, "more contracts") })
	checkClean(t, screen)
	// Later redraws leave nothing behind.
	screen = m.waitScreen("a redraw", func(s string) bool { return strings.Contains(s, "0/820 priced") && !strings.Contains(s, " 0.0s") })
	checkClean(t, screen)

	srv.Stop(pglocal.Fast)
	screen = m.waitScreen("the outage", func(s string) bool { return strings.Contains(s, "database unreachable, retrying") })
	checkClean(t, screen)

	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	screen = m.waitScreen("recovery", func(s string) bool {
		return !strings.Contains(s, "unreachable") && strings.Contains(s, "more contracts")
	})
	checkClean(t, screen)
	t.Logf("screen after the restart:\n%s", screen)
}
