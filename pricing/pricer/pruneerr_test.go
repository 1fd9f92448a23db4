package pricer_test

import (
	"errors"
	"testing"

	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing/pricer"
)

// A prune's error says first what was not found, then an interruption,
// then what was skipped; none when every load went.
func TestPruneReportErr(t *testing.T) {
	t.Parallel()
	report := func(outcomes ...string) pricer.PruneReport {
		var res []pricer.LoadPrune
		for i, o := range outcomes {
			res = append(res, pricer.LoadPrune{LoadID: int64(i + 1), Outcome: o})
		}
		return pricer.NewPruneReport(res, 0, false)
	}
	for _, tc := range []struct {
		r     pricer.PruneReport
		cause error
		msg   string
	}{
		{report(pricer.PruneDone, pricer.PruneAlready), nil, ""},
		{report(pricer.PruneSkipped, pricer.PruneNotFound, pricer.PruneInterrupted), partition.ErrNotFound, "no such load: 2"},
		{report(pricer.PruneSkipped, pricer.PruneInterrupted), pricer.ErrNotPruned,
			"interrupted while pruning load 2: run the same command again to carry on"},
		{report(pricer.PruneSkipped, pricer.PruneDone, pricer.PruneSkipped), pricer.ErrNotPruned,
			"2 loads (1, 3) not pruned: not all their records are priced yet"},
	} {
		err := tc.r.Err()
		if tc.cause == nil {
			if err != nil {
				t.Errorf("all pruned: %v", err)
			}
			continue
		}
		if !errors.Is(err, tc.cause) || err.Error() != tc.msg {
			t.Errorf("Err() = %v, want %q wrapping %v", err, tc.msg, tc.cause)
		}
	}
}
