package main

import (
	"context"
	"flag"
)

// horizonResult is the horizon scenario's measurements: pricing while
// another session pins the xmin horizon, against the same run unpinned.
type horizonResult struct{}

// runHorizon measures pricing with and without a pinned horizon.
func (e *env) runHorizon(ctx context.Context, res *results) error {
	return nil
}

func horizonSection(w writer, r *results) {}

// horizonConfig holds the horizon scenario's knobs.
type horizonConfig struct{}

func (c *horizonConfig) flags(fs *flag.FlagSet) {}
