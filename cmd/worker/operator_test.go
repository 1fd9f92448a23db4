package main

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/batonhq/baton/internal/clienv"
	"github.com/batonhq/baton/internal/pgtest"
)

// probe prints the status line only, the body with --verbose, and never a
// password in the URL.
func TestProbePrintsTheStatusLine(t *testing.T) {
	t.Parallel()
	const page = "<!doctype html><html><body>the whole console page</body></html>"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/down" {
			http.Error(w, "database unreachable", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte(page))
	}))
	defer srv.Close()
	c := cli{t, ""}
	up := strings.Replace(srv.URL, "http://", "http://baton:pw-S3CRET@", 1) + "/"
	if out, errs, code := c.run("probe", up); code != 0 || out != "200 OK\n" {
		t.Fatalf("probe of a page: exit %d, stdout %q (want the status line only)\n%s", code, out, errs)
	}
	if out, errs, code := c.run("probe", "--verbose", up); code != 0 || out != "200 OK\n"+page {
		t.Fatalf("probe --verbose: exit %d, stdout %q\n%s", code, out, errs)
	}
	down := strings.Replace(srv.URL, "http://", "http://baton:pw-S3CRET@", 1) + "/down"
	out, errs, code := c.run("probe", down)
	if code != clienv.ExitFailure || !strings.Contains(errs, "503 Service Unavailable") || strings.Contains(errs, "database unreachable") || out != "" {
		t.Fatalf("probe of a 503: exit %d\nstdout %q\nstderr %q", code, out, errs)
	}
	out, errs, code = c.run("probe", "--verbose", down)
	if code != clienv.ExitFailure || !strings.Contains(errs, "503 Service Unavailable") || !strings.Contains(errs, "database unreachable") {
		t.Fatalf("probe --verbose of a 503: exit %d\nstdout %q\nstderr %q", code, out, errs)
	}
	for _, o := range []string{out, errs} {
		if strings.Contains(o, "pw-S3CRET") {
			t.Fatalf("probe printed the URL's password:\n%s", o)
		}
	}
}

// schedule list shows each job's command, cut in the middle when long.
func TestScheduleListShowsEachCommand(t *testing.T) {
	t.Parallel()
	c := cli{t, pgtest.NewURL(t)}
	c.mustRun("schedule", "add", "cleanup", "--every", "1h", "--", "/usr/local/bin/cleanup", "--older-than", "7d",
		"--exclude", "a very long pattern that does not fit in a column", "--final-arg")
	c.mustRun("schedule", "add", "short", "--every", "1h", "--", "sh", "-c", "echo it's")
	c.mustRun("schedule", "add", "verify", "--every", "1h", "--builtin", "verify")
	out := c.mustRun("schedule", "list")
	lines := strings.Split(out, "\n")
	if !strings.Contains(lines[0], "COMMAND") {
		t.Fatalf("no COMMAND column:\n%s", out)
	}
	// Columns by character: the cut's "…" is one character of three bytes.
	col := len([]rune(lines[0][:strings.Index(lines[0], "COMMAND")]))
	next := len([]rune(lines[0][:strings.Index(lines[0], "NEXT RUN")]))
	want := map[string]string{
		"cleanup": "/usr/local/bin/cleanup …in a column' --final-arg", // 48 characters: the program and the last arguments
		"short":   `sh -c 'echo it'\''s'`,
		"verify":  "builtin verify",
	}
	for _, l := range lines[1:] {
		name, _, _ := strings.Cut(l, " ")
		w, ok := want[name]
		if !ok {
			continue
		}
		if got := strings.TrimSpace(string([]rune(l)[col:next])); got != w {
			t.Errorf("job %s: command %q, want %q\n%s", name, got, w, out)
		}
		delete(want, name)
	}
	if len(want) > 0 {
		t.Fatalf("jobs missing from the list: %v\n%s", want, out)
	}
}

// The console's help steers the token to the environment and never shows
// a token's value, not even the one set there.
func TestConsoleHelpPrefersTheEnvironmentForTheToken(t *testing.T) {
	t.Parallel()
	const token = "tok-S3CRET-value"
	for _, cmd := range []string{"ui", "run"} {
		c := cli{t, ""}
		x := c.command(cmd, "--help")
		x.Env = append(x.Env, "BATON_UI_TOKEN="+token)
		b, err := x.CombinedOutput()
		if err != nil {
			t.Fatalf("worker %s --help: %v\n%s", cmd, err, b)
		}
		help := string(b)
		if strings.Contains(help, token) {
			t.Fatalf("worker %s --help shows the token:\n%s", cmd, help)
		}
		if !strings.Contains(help, "Prefer $BATON_UI_TOKEN") {
			t.Errorf("worker %s --help does not say to prefer BATON_UI_TOKEN:\n%s", cmd, help)
		}
		if strings.Contains(help, "--ui-token \"") || strings.Contains(help, "--ui-token $") {
			t.Errorf("worker %s --help shows a token on the command line:\n%s", cmd, help)
		}
	}
}

// worker --version says the version, the commit and the Go version.
func TestVersion(t *testing.T) {
	t.Parallel()
	out, errs, code := cli{t, ""}.run("--version")
	if code != 0 || !strings.HasPrefix(out, "worker ") || !strings.Contains(out, "\ncommit ") ||
		!strings.Contains(out, runtime.Version()) {
		t.Fatalf("worker --version: exit %d\n%s%s", code, out, errs)
	}
}
