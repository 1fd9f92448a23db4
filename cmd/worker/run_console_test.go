package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/batonhq/baton/internal/pgtest"
)

// "worker run --ui-addr" serves the console beside the worker: its
// contracts page lists the contracts, and its workers page shows this
// worker woken by notifications (listen).
func TestRunServesTheConsole(t *testing.T) {
	t.Parallel()
	c := cli{t, pgtest.NewURL(t)}
	c.mustRun("load", "--tiers", vectors+"tiers.csv", "--records", vectors+"records.csv")
	cmd := c.command("run", "--id", "served", "--ui-addr", "127.0.0.1:0", "--log-format", "json",
		"--heartbeat", "100ms", "--stale-after", "1s")
	base := serveConsole(t, cmd)
	if code, body := get(t, base+"/contracts"); code != http.StatusOK || !strings.Contains(body, `data-contract="basic-3-tiers"`) {
		t.Fatalf("/contracts = %d:\n%s", code, body)
	}
	// The worker names its listening connection once LISTEN is set up;
	// the page says so as soon as it is.
	waitFor(t, "the worker shown listening", func() bool {
		_, body := get(t, base+"/workers")
		return strings.Contains(body, "served#") && strings.Contains(body, "<td>listen</td>")
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("worker run with a console after SIGTERM: %v", err)
	}
}

// serveConsole starts cmd, a worker command serving the console with JSON
// logs, and returns the console's base URL from its "serving the console"
// log line. The process is killed when the test ends.
func serveConsole(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	out, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var base string
	sc := bufio.NewScanner(out)
	for base == "" && sc.Scan() {
		var e struct{ Msg, URL string }
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Msg == "serving the console" {
			base = strings.TrimSuffix(e.URL, "/")
		}
	}
	if base == "" {
		t.Fatalf("%s did not serve the console: %v", strings.Join(cmd.Args, " "), sc.Err())
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return base
}
