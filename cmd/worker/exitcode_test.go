package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/demo"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing/ingest"
	"github.com/batonhq/baton/schema"
)

// Each typed error a command may return, however deeply wrapped, maps to
// its documented exit code.
func TestExitCodeTable(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error { return fmt.Errorf("doing something: %w", err) }
	for _, tc := range []struct {
		err  error
		want int
	}{
		{errors.New("connection refused"), exitFailure},
		{usageError("--flag: bad"), exitUsage},
		{&exitError{exitNotFound, errors.New("no such job")}, exitNotFound},
		{&demo.UsageError{Err: errors.New("bad place")}, exitUsage},
		{&schema.MissingError{Schema: "nosuch"}, exitUsage},
		{fmt.Errorf("%w: 1 migration pending", schema.ErrOutdated), exitUsage},
		{fmt.Errorf("%w: upgrade this worker", schema.ErrTooNew), exitUsage},
		{&ingest.InvalidInputError{Total: 1}, exitBadInput},
		{&distributor.IncompleteError{Quarantined: 2}, exitIncomplete},
		{partition.ErrNotFound, exitNotFound},
		{dbconn.ErrNotReplicated, exitNotReplicated},
	} {
		if got := exitCode(wrap(tc.err)); got != tc.want {
			t.Errorf("exitCode(%T %v) = %d, want %d", tc.err, tc.err, got, tc.want)
		}
	}
}
