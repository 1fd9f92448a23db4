package schedule

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// lineHandler is a slog handler that sends every message to a channel.
type lineHandler struct {
	mu    *sync.Mutex
	lines chan string
	attrs []slog.Attr
}

func newLineLogger() (*slog.Logger, chan string) {
	ch := make(chan string, 100)
	return slog.New(lineHandler{mu: &sync.Mutex{}, lines: ch}), ch
}

func (h lineHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h lineHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	for _, a := range h.attrs {
		b.WriteString(" " + a.String())
	}
	r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
	h.lines <- b.String()
	return nil
}
func (h lineHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return lineHandler{mu: h.mu, lines: h.lines, attrs: append(append([]slog.Attr{}, h.attrs...), as...)}
}
func (h lineHandler) WithGroup(string) slog.Handler { return h }

func waitLine(t *testing.T, lines chan string, substr string) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l := <-lines:
			if strings.Contains(l, substr) {
				return l
			}
		case <-timeout:
			t.Fatalf("no log line containing %q", substr)
		}
	}
}

func testRun() *Run {
	slot := time.Date(2026, 11, 23, 12, 0, 1, 0, time.UTC)
	return &Run{Job: "nightly", Slot: slot, Fence: 42, Worker: "w1#ab", IdempotencyKey: "nightly@" + slot.Format(time.RFC3339Nano)}
}

// The command sees the run in its environment; its output is logged with
// the job's name; its exit status is the result.
func TestCommandEnvironmentOutputAndStatus(t *testing.T) {
	log, lines := newLineLogger()
	fn := Command([]string{"sh", "-c", `echo "$BATON_JOB|$BATON_SLOT|$BATON_FENCE|$BATON_IDEMPOTENCY_KEY|$BATON_WORKER"`}, 0, log)
	if err := fn(context.Background(), testRun()); err != nil {
		t.Fatal(err)
	}
	l := waitLine(t, lines, "nightly|")
	if !strings.HasPrefix(l, "nightly|2026-11-23T12:00:01Z|42|nightly@2026-11-23T12:00:01Z|w1#ab ") || !strings.Contains(l, "job=nightly") {
		t.Fatalf("logged %q", l)
	}
	if err := Command([]string{"sh", "-c", "exit 3"}, 0, log)(context.Background(), testRun()); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("exit 3: %v", err)
	}
}

// When the run's context ends the command gets SIGTERM, and SIGKILL if it
// ignores it.
func TestCommandStoppedBySIGTERMThenSIGKILL(t *testing.T) {
	for _, tc := range []struct {
		name, script, want string
	}{
		{"sigterm", `trap 'echo got-term; exit 0' TERM; echo ready; while :; do sleep 0.05; done`, "got-term"},
		{"sigkill", `trap '' TERM; echo ready; while :; do sleep 0.05; done`, "SIGKILL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log, lines := newLineLogger()
			ctx, cancel := context.WithCancelCause(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- Command([]string{"sh", "-c", tc.script}, 300*time.Millisecond, log)(ctx, testRun())
			}()
			waitLine(t, lines, "ready")
			cancel(ErrLockAtMostFor)
			waitLine(t, lines, tc.want)
			err := <-done
			if tc.name == "sigkill" && (err == nil || !strings.Contains(err.Error(), "killed")) {
				t.Fatalf("command ignoring SIGTERM: %v, want killed", err)
			}
		})
	}
}
