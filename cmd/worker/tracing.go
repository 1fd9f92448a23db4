package main

import (
	"context"
	"time"

	"github.com/batonhq/baton/internal/tracing"
)

// startTracing installs OpenTelemetry tracing as the OTEL_* environment
// variables say (off without them) and returns the function that flushes
// the spans still buffered.
func startTracing(ctx context.Context, g *globals) (func(), error) {
	shutdown, err := tracing.Setup(ctx, "baton-worker")
	if err != nil {
		return nil, usageError("%v", err)
	}
	if tracing.Enabled() {
		g.logger.Info("tracing on (OTEL_* environment)")
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			g.logger.Warn("could not flush traces", "error", err)
		}
	}, nil
}
