package distributor

import (
	"slices"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/taskstore"
	"github.com/jonboulle/clockwork"
)

// A candidate lost to another worker's claim transaction is skipped while
// it reads at the same version, for a lease's length at most; one that
// moved on (or is no longer read) is forgotten.
func TestSkipLostCandidates(t *testing.T) {
	clock := clockwork.NewFakeClock()
	d := &Distributor{cfg: Config{Clock: clock, StaleAfter: 10 * time.Second}, lostClaims: map[string]lostClaim{
		"a": {version: 3, at: clock.Now()},
		"b": {version: 5, at: clock.Now()},
		"c": {version: 1, at: clock.Now()},
	}}
	keysOf := func(cs []taskstore.Candidate) (out []string) {
		for _, c := range cs {
			out = append(out, c.Key)
		}
		return out
	}
	got := d.skipLost([]taskstore.Candidate{{Key: "a", Version: 3}, {Key: "b", Version: 7}, {Key: "d", Version: 1}})
	if k := keysOf(got); !slices.Equal(k, []string{"b", "d"}) {
		t.Fatalf("kept %v, want b (moved on) and d (never lost)", k)
	}
	if _, ok := d.lostClaims["a"]; !ok || len(d.lostClaims) != 1 {
		t.Fatalf("remembered %v, want only a", d.lostClaims)
	}
	clock.Advance(10 * time.Second)
	if k := keysOf(d.skipLost([]taskstore.Candidate{{Key: "a", Version: 3}})); !slices.Equal(k, []string{"a"}) {
		t.Fatalf("after a lease's length kept %v, want a again", k)
	}
}
