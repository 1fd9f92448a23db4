package main

import "context"

// horizonResult is the horizon scenario's measurements: pricing while
// another session pins the xmin horizon, against the same run unpinned.
type horizonResult struct{}

// runHorizon measures pricing with and without a pinned horizon.
func (e *env) runHorizon(ctx context.Context, res *results) error {
	return nil
}

func horizonSection(w writer, r *results) {}
