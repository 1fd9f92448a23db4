package schedule

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// lockedBuffer is a bytes.Buffer safe for the command's output goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A command's standard error is logged with the run's result: at warn when
// the run failed, at info (result=ok) when it succeeded; standard output
// stays at info.
func TestCommandStderrLevelFollowsTheResult(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		fail         bool
		want         []string
	}{
		{"failed", `echo out-line; echo "err-line" >&2; exit 3`, true, []string{
			`level=INFO msg=out-line`, `stream=stdout`,
			`level=WARN msg=err-line`, `stream=stderr result=failed`,
		}},
		{"succeeded", `echo out-line; echo "err-line" >&2`, false, []string{
			`level=INFO msg=out-line`, `stream=stdout`,
			`level=INFO msg=err-line`, `stream=stderr result=ok`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf lockedBuffer
			log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
			err := Command([]string{"sh", "-c", tc.script}, 0, log)(context.Background(), testRun())
			if (err != nil) != tc.fail {
				t.Fatalf("run: %v, want failed %v", err, tc.fail)
			}
			out := buf.String()
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("log lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(out, "level=WARN") != tc.fail {
				t.Errorf("warn in the log of a run that failed=%v:\n%s", tc.fail, out)
			}
		})
	}
	// A command silent on standard error logs nothing for it.
	var buf lockedBuffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	if err := Command([]string{"sh", "-c", "exit 1"}, 0, log)(context.Background(), testRun()); err == nil {
		t.Fatal("exit 1 succeeded")
	}
	if strings.Contains(buf.String(), "stderr") {
		t.Fatalf("empty standard error logged:\n%s", buf.String())
	}
}
