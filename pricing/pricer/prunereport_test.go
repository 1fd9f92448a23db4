package pricer_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/pricing/pricer"
)

// A prune report sums the loads' records and transactions, keeps the
// longest, lists the loads of each outcome, and words what was not pruned.
func TestPruneReport(t *testing.T) {
	t.Parallel()
	r := pricer.NewPruneReport([]pricer.LoadPrune{
		{LoadID: 1, Outcome: pricer.PruneDone, Contracts: 2, Records: 10, Batches: 2, LongestBatch: 30 * time.Millisecond},
		{LoadID: 2, Outcome: pricer.PruneSkipped, Reason: "load 2: 3 records not priced yet"},
		{LoadID: 3, Outcome: pricer.PruneNotFound},
		{LoadID: 4, Outcome: pricer.PruneDone, Contracts: 1, Records: 5, Batches: 1, LongestBatch: 50 * time.Millisecond},
	}, 2*time.Second, false)
	if r.Records != 15 || r.Transactions != 3 || r.LongestTransactionMS != 50 || r.ElapsedMS != 2000 {
		t.Fatalf("sums: %+v", r)
	}
	if got := r.IDs(pricer.PruneDone); !slices.Equal(got, []string{"1", "4"}) {
		t.Errorf("pruned: %v", got)
	}
	var b strings.Builder
	r.WriteText(&b)
	want := "load 2: skipped: 3 records not priced yet\nload 3: not found\n" +
		"pruned 2 loads: 15 records and their priced rows, of 3 contracts, in 2s (3 transactions, the longest 50ms)\n"
	if b.String() != want {
		t.Errorf("text:\n got %q\nwant %q", b.String(), want)
	}
}
