package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// goroutinePanicEnv makes the worker process panic in a goroutine of its
// own, with its database URL in the message, as soon as it starts.
const goroutinePanicEnv = "BATON_TEST_GOROUTINE_PANIC"

func init() {
	if os.Getenv(goroutinePanicEnv) == "1" {
		testHookGuarded = func() {
			go func() { panic("lost the connection to " + os.Getenv("DATABASE_URL")) }()
			select {}
		}
	}
}

// A panic in a goroutine other than main bypasses the recover in main: the
// Go runtime writes its report to file descriptor 2 as the process dies.
// That report reaches stderr complete, and without the password.
func TestPanicInAGoroutineShowsNoPassword(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{
		"postgres://baton:S3cret x@127.0.0.1:1/baton",
		"postgres://baton:p@ss/w#rd?x:1@127.0.0.1:1/baton",
		"host=127.0.0.1 port=1 user=baton password='S3cret x'",
	} {
		cmd := cli{t, dsn}.command("status")
		cmd.Env = append(cmd.Env, goroutinePanicEnv+"=1")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Fatalf("%v, want exit code 2 (a panic):\n%s", err, stderr.String())
		}
		out := stderr.String()
		for _, leak := range []string{"S3cret", "cret x", "ss/w#rd"} {
			if strings.Contains(out, leak) {
				t.Fatalf("stderr holds %q:\n%s", leak, out)
			}
		}
		for _, want := range []string{"panic: lost the connection to ", "xxxxx", "goroutine ", "crash_test.go"} {
			if !strings.Contains(out, want) {
				t.Fatalf("stderr lacks %q:\n%s", want, out)
			}
		}
	}
}
