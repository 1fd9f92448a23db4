package dbconn

import (
	"context"
	"log/slog"
	"time"

	"github.com/jonboulle/clockwork"
)

// Wait's back-off between attempts: WaitFirstDelay, doubling up to
// WaitMaxDelay.
const (
	WaitFirstDelay = time.Second
	WaitMaxDelay   = 15 * time.Second
)

// WaitConfig says how Wait waits for a database.
type WaitConfig struct {
	// Timeout is how long Wait keeps retrying. Zero: a single attempt.
	Timeout time.Duration
	// Retryable reports whether waiting may cure an error of open: a
	// database that does not answer yet, say, but not a malformed URL,
	// a refused password, or a schema that does not exist. Nil: no
	// error is retried.
	Retryable func(error) bool
	// Message is the error as Wait logs it. Defaults to err.Error().
	Message func(error) string
	// Logger says once that Wait waits, and once that the database
	// answered after all. Defaults to slog.Default().
	Logger *slog.Logger
	// Clock times the back-off. Defaults to the real clock.
	Clock clockwork.Clock
}

// Wait calls open until it succeeds, returns an error that
// cfg.Retryable says no wait cures, or cfg.Timeout would pass before the
// next attempt; then it returns open's last error. It waits
// WaitFirstDelay after the first failure, doubling up to WaitMaxDelay.
// A cancelled ctx ends the wait with open's last error.
func Wait(ctx context.Context, cfg WaitConfig, open func(context.Context) (*DB, error)) (*DB, error) {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	clock := cfg.Clock
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	message := cfg.Message
	if message == nil {
		message = func(err error) string { return err.Error() }
	}
	deadline := clock.Now().Add(cfg.Timeout)
	delay := WaitFirstDelay
	warned := false
	for {
		db, err := open(ctx)
		if err == nil {
			if warned {
				logger.Info("database reachable", "event", "database_reachable")
			}
			return db, nil
		}
		if cfg.Retryable == nil || !cfg.Retryable(err) || clock.Now().Add(delay).After(deadline) {
			return nil, err
		}
		if !warned {
			logger.Warn("database not ready, waiting for it", "event", "database_unreachable",
				"error", message(err), "wait", cfg.Timeout.String())
			warned = true
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-clock.After(delay):
		}
		delay = min(2*delay, WaitMaxDelay)
	}
}
