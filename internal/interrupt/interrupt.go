// Package interrupt is how a command stops on a signal: the first SIGINT
// or SIGTERM cancels its context (a graceful stop), a second exits at once,
// and a command stopped part-way exits as shells report a process killed
// by the signal.
package interrupt

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// Context is cancelled by the first SIGINT or SIGTERM, which asks
// for a graceful stop; a second one exits at once, with exit code 1. The
// context's cause is a signalCause naming the signal.
func Context() (context.Context, func()) {
	ctx, cancelCause := context.WithCancelCause(context.Background())
	cancel := func() { cancelCause(context.Canceled) }
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		select {
		case sig := <-ch:
			slog.Info("signal received: stopping gracefully (send again to exit at once)", "event", "signal", "signal", sig.String())
			cancelCause(signalCause{sig})
		case <-ctx.Done():
			return
		}
		sig := <-ch
		slog.Warn("second signal: exiting now, abandoning the graceful stop", "event", "signal", "signal", sig.String())
		os.Exit(1)
	}()
	return ctx, func() { signal.Stop(ch); cancel() }
}

// signalCause is the cause of a context cancelled by a signal.
type signalCause struct{ sig os.Signal }

func (s signalCause) Error() string { return "stopped by " + s.sig.String() }

// ExitCode is the exit code of a command stopped part-way by the
// signal that cancelled ctx: 128 + the signal's number (130 for SIGINT, 143
// for SIGTERM), as shells report a process killed by it.
func ExitCode(ctx context.Context) int {
	var sc signalCause
	if errors.As(context.Cause(ctx), &sc) {
		if n, ok := sc.sig.(syscall.Signal); ok {
			return 128 + int(n)
		}
	}
	return 128 + int(syscall.SIGINT)
}
