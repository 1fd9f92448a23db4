//go:build unix

package redact

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"testing/iotest"
)

// guardedEnv makes the test binary a process that guards its standard
// error and then does what the variable says (see guarded).
const guardedEnv = "BATON_TEST_GUARDED"

const guardedDSN = "postgres://baton:S3cret x@db.example/baton"

func TestMain(m *testing.M) {
	if ServeStderrFilter() {
		os.Exit(0)
	}
	if what := os.Getenv(guardedEnv); what != "" {
		os.Exit(guarded(what))
	}
	os.Exit(m.Run())
}

// guarded guards the process's standard error, writes the DSN to it
// unredacted, and then panics in a goroutine of its own ("panic"), in a
// goroutine with a recover in the main one (which cannot catch it:
// "recover"), or exits normally ("exit").
func guarded(what string) int {
	g, err := GuardStderr(guardedDSN)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "raw write: connecting to %s\n", guardedDSN)
	fmt.Fprintf(New(guardedDSN).Writer(g.Stderr), "direct write: connecting to %s\n", guardedDSN)
	switch what {
	case "panic":
		go func() { panic(fmt.Sprintf("lost connection to %s (password %q)", guardedDSN, "S3cret x")) }()
		select {}
	case "recover":
		defer func() { _ = recover() }()
		go func() { panic(fmt.Errorf("opening %s", guardedDSN)) }()
		select {}
	}
	if err := g.Close(); err != nil {
		fmt.Fprintln(g.Stderr, err)
		return 1
	}
	return 0
}

func runGuarded(t *testing.T, what string) (string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), guardedEnv+"="+what)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return stderr.String(), cmd.ProcessState.ExitCode()
}

// A panic in a goroutine other than main, which no recover can catch, is
// reported by the Go runtime straight to file descriptor 2 as the process
// dies: the report reaches the original standard error complete, and
// without the password.
func TestGuardRedactsAPanicInAnyGoroutine(t *testing.T) {
	t.Parallel()
	for _, what := range []string{"panic", "recover"} {
		t.Run(what, func(t *testing.T) {
			t.Parallel()
			out, code := runGuarded(t, what)
			if code != 2 {
				t.Fatalf("exit code %d, want 2 (a panic):\n%s", code, out)
			}
			for _, leak := range []string{"S3cret", "cret x"} {
				if strings.Contains(out, leak) {
					t.Fatalf("standard error holds %q:\n%s", leak, out)
				}
			}
			for _, want := range []string{
				"raw write: connecting to postgres://baton:xxxxx@db.example/baton\n",
				"direct write: connecting to postgres://baton:xxxxx@db.example/baton\n",
				"panic: ", "postgres://baton:xxxxx@db.example/baton", "goroutine ", "guard_test.go",
			} {
				if !strings.Contains(out, want) {
					t.Fatalf("standard error lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

// A process that exits normally has everything it wrote to file
// descriptor 2 written out, redacted, by the time Close returns. (The two
// lines may come in either order: one went through the filter.)
func TestGuardFlushesOnClose(t *testing.T) {
	t.Parallel()
	out, code := runGuarded(t, "exit")
	if code != 0 {
		t.Fatalf("exit code %d:\n%s", code, out)
	}
	raw := "raw write: connecting to postgres://baton:xxxxx@db.example/baton\n"
	direct := "direct write: connecting to postgres://baton:xxxxx@db.example/baton\n"
	if out != raw+direct && out != direct+raw {
		t.Fatalf("standard error:\n%s\nwant exactly:\n%s%s", out, raw, direct)
	}
}

// Filter cleans whole lines, however its input arrives: a password split
// between two reads is still found, a line longer than Filter holds back
// passes whole, and a last line without its end is written out when the
// input ends.
func TestFilter(t *testing.T) {
	in := "one postgres://u:S3cret x@h/db\ntwo password='a b c' three\n" + strings.Repeat("y", maxLine+10) +
		"\nlast postgres://u:S3cret x@h/db"
	want := "one postgres://u:xxxxx@h/db\ntwo password='xxxxx' three\n" + strings.Repeat("y", maxLine+10) +
		"\nlast postgres://u:xxxxx@h/db"
	for how, reader := range map[string]func(io.Reader) io.Reader{
		"at once":       func(r io.Reader) io.Reader { return r },
		"a byte a time": iotest.OneByteReader,
		"in halves":     iotest.HalfReader,
	} {
		var out bytes.Buffer
		if err := Filter(&out, reader(strings.NewReader(in)), New()); err != nil {
			t.Fatalf("%s: %v", how, err)
		}
		if out.String() != want {
			t.Errorf("%s: got %q…", how, out.String()[:min(out.Len(), 120)])
		}
	}
}
