package distributor

import (
	"testing"
	"time"

	"github.com/batonhq/baton/internal/taskstore"
)

// A dead worker's partition is taken beyond the share once this worker has
// seen it waiting, at the same version, for SpreadTakeovers.
func TestTakeoverWaitStartsAtFirstSightPerVersion(t *testing.T) {
	var w takeoverWait
	t0 := time.Unix(1000, 0)
	cands := []taskstore.Candidate{{Key: "a", Version: 3, Owned: true}, {Key: "b", Version: 5, Owned: true}, {Key: "f", Version: 1}}
	if got := w.beyondShare(cands, t0, time.Second); len(got) != 0 {
		t.Fatalf("at first sight: %v, want none beyond the share", got)
	}
	if got := w.beyondShare(cands, t0.Add(999*time.Millisecond), time.Second); len(got) != 0 {
		t.Fatalf("before the wait: %v, want none", got)
	}
	// b was claimed and is stale again at a new version: its wait starts
	// afresh; a has waited long enough.
	cands[1].Version = 7
	if got := w.beyondShare(cands, t0.Add(time.Second), time.Second); !got["a"] || got["b"] || got["f"] {
		t.Fatalf("after the wait: %v, want a only", got)
	}
	// Rows no longer stale are forgotten.
	w.beyondShare(cands[1:2], t0.Add(2*time.Second), time.Second)
	if _, ok := w.seen["a"]; ok {
		t.Fatal("a row no longer found is still remembered")
	}
	if got := w.beyondShare(cands, t0, -1); len(got) != 2 {
		t.Fatalf("takeovers not spread: %v, want both stale rows at once", got)
	}
}
