package clienv

import (
	"errors"
	"fmt"
	"testing"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/demo"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing/export"
	"github.com/batonhq/baton/pricing/ingest"
	"github.com/batonhq/baton/pricing/pricer"
	"github.com/batonhq/baton/schema"
	"github.com/batonhq/baton/workerproc"
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
		{errors.New("connection refused"), ExitFailure},
		{UsageError("--flag: bad"), ExitUsage},
		{&ExitError{ExitNotFound, errors.New("no such job")}, ExitNotFound},
		{&demo.UsageError{Err: errors.New("bad place")}, ExitUsage},
		{&schema.MissingError{Schema: "nosuch"}, ExitUsage},
		{fmt.Errorf("%w: 1 migration pending", schema.ErrOutdated), ExitUsage},
		{fmt.Errorf("%w: upgrade this worker", schema.ErrTooNew), ExitUsage},
		{&workerproc.StartError{Err: errors.New("listen tcp: address already in use")}, ExitUsage},
		{&ingest.InvalidInputError{Total: 1}, ExitBadInput},
		{&distributor.IncompleteError{Quarantined: 2}, ExitIncomplete},
		{export.ErrIncomplete, ExitIncomplete},
		{pricer.PruneReport{Loads: []pricer.PruneReportLoad{{LoadPrune: pricer.LoadPrune{LoadID: 1, Outcome: pricer.PruneSkipped}}}}.Err(), ExitIncomplete},
		{pricer.PruneReport{Loads: []pricer.PruneReportLoad{{LoadPrune: pricer.LoadPrune{LoadID: 1, Outcome: pricer.PruneNotFound}}}}.Err(), ExitNotFound},
		{partition.ErrNotFound, ExitNotFound},
		{dbconn.ErrNotReplicated, ExitNotReplicated},
	} {
		if got := ExitCode(wrap(tc.err)); got != tc.want {
			t.Errorf("ExitCode(%T %v) = %d, want %d", tc.err, tc.err, got, tc.want)
		}
	}
}

// A reworded error says the command's words and still matches its cause.
func TestRewordedKeepsItsCause(t *testing.T) {
	t.Parallel()
	err := &RewordedError{"work remains: 2 contracts are quarantined", &distributor.IncompleteError{Quarantined: 2}}
	if got := ExitCode(err); got != ExitIncomplete {
		t.Errorf("ExitCode = %d, want %d", got, ExitIncomplete)
	}
	if err.Error() != "work remains: 2 contracts are quarantined" {
		t.Errorf("Error() = %q", err.Error())
	}
}
