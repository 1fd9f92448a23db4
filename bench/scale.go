package main

import (
	"context"
	"flag"
)

// scaleResult is the scale scenario's measurements: 100M records loaded,
// priced and exported end to end, each stage against its 1M rate.
type scaleResult struct{}

// runScale runs the 100M-record end-to-end scenario.
func (e *env) runScale(ctx context.Context, res *results) error {
	return nil
}

func scaleSection(w writer, r *results) {}

// scaleConfig holds the scale scenario's knobs.
type scaleConfig struct{}

func (c *scaleConfig) flags(fs *flag.FlagSet) {}
