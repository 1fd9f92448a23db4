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
	if got, first := w.beyondShare(cands, t0, time.Second); len(got) != 0 || len(first) != 2 || !first["a"] || !first["b"] {
		t.Fatalf("at first sight: %v (first seen %v), want none beyond the share, a and b first seen", got, first)
	}
	if got, first := w.beyondShare(cands, t0.Add(999*time.Millisecond), time.Second); len(got) != 0 || len(first) != 0 {
		t.Fatalf("before the wait: %v (first seen %v), want none", got, first)
	}
	// b was claimed and is stale again at a new version: its wait starts
	// afresh; a has waited long enough.
	cands[1].Version = 7
	if got, first := w.beyondShare(cands, t0.Add(time.Second), time.Second); !got["a"] || got["b"] || got["f"] || !first["b"] || len(first) != 1 {
		t.Fatalf("after the wait: %v (first seen %v), want a only, b seen afresh", got, first)
	}
	// Rows no longer stale are forgotten.
	w.beyondShare(cands[1:2], t0.Add(2*time.Second), time.Second)
	if _, ok := w.seen["a"]; ok {
		t.Fatal("a row no longer found is still remembered")
	}
	if got, _ := w.beyondShare(cands, t0, -1); len(got) != 2 {
		t.Fatalf("takeovers not spread: %v, want both stale rows at once", got)
	}
}
