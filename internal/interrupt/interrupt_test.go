package interrupt

import (
	"context"
	"syscall"
	"testing"
)

// A command stopped by a signal exits with 128 + its number; one whose
// context ended otherwise, as if by SIGINT.
func TestExitCode(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(signalCause{syscall.SIGTERM})
	if got := ExitCode(ctx); got != 143 {
		t.Errorf("SIGTERM: exit %d, want 143", got)
	}
	if got := ExitCode(context.Background()); got != 130 {
		t.Errorf("no signal: exit %d, want 130", got)
	}
}
