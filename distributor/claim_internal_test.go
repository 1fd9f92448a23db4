package distributor

import (
	"slices"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/batonhq/baton/partition"
)

func TestPickClaims(t *testing.T) {
	u := func(k string) partition.Candidate { return partition.Candidate{Key: k} }
	o := func(k string) partition.Candidate { return partition.Candidate{Key: k, Owned: true} }
	keys := func(cs []partition.Candidate) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Key)
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		cands      []partition.Candidate
		want, room int
		try, rest  []string
	}{
		{"below share takes unowned up to want", []partition.Candidate{u("a"), u("b"), u("c")}, 2, 5, []string{"a", "b"}, []string{"c"}},
		{"at share takes only a dead worker's", []partition.Candidate{u("a"), o("b"), u("c"), o("d")}, 0, 5, []string{"b", "d"}, []string{"a", "c"}},
		{"dead worker's beyond want, within room", []partition.Candidate{o("a"), o("b"), u("c")}, 1, 3, []string{"a", "b", "c"}, nil},
		{"room caps everything", []partition.Candidate{o("a"), o("b"), u("c")}, 1, 2, []string{"a", "b"}, []string{"c"}},
		{"no room", []partition.Candidate{o("a")}, 0, 0, nil, []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			try, rest := pickClaims(tc.cands, tc.want, tc.room)
			if !slices.Equal(keys(try), tc.try) || !slices.Equal(keys(rest), tc.rest) {
				t.Fatalf("pickClaims = %v, %v; want %v, %v", keys(try), keys(rest), tc.try, tc.rest)
			}
		})
	}
}

func TestPlanShare(t *testing.T) {
	load := func(busy, live, unclaimed, wanted int) partition.Load {
		return partition.Load{Busy: busy, LiveWorkers: live, Unclaimed: unclaimed, Wanted: wanted}
	}
	for _, tc := range []struct {
		name       string
		load       partition.Load
		held, idle int
		mode       Mode
		max        int
		want       sharePlan
	}{
		{"alone takes up to MaxPartitions", load(20, 1, 20, 0), 0, 0, ModeLock, 8, sharePlan{share: 8, claim: 8, overflow: true}},
		{"no work still allows one", load(0, 3, 0, 0), 0, 0, ModeLock, 8, sharePlan{share: 1, claim: 1}},
		{"ceil of busy over live", load(10, 3, 10, 4), 1, 0, ModeLock, 8, sharePlan{share: 4, claim: 3}},
		{"capped by MaxPartitions", load(100, 2, 50, 8), 0, 0, ModeLock, 8, sharePlan{share: 8, claim: 8}},
		{"surplus handed back to a worker that wants it", load(12, 3, 0, 2), 6, 0, ModeLock, 12, sharePlan{share: 4, handBack: 2}},
		{"no more handed back than is wanted", load(12, 3, 0, 1), 6, 0, ModeLock, 12, sharePlan{share: 4, handBack: 1}},
		{"surplus kept while work is unclaimed", load(12, 3, 2, 2), 6, 0, ModeLock, 12, sharePlan{share: 4}},
		{"surplus kept when nobody wants more", load(12, 3, 0, 0), 6, 0, ModeLock, 12, sharePlan{share: 4}},
		{"unclaimed work nobody wants may be taken beyond the share", load(30, 3, 9, 0), 10, 0, ModeLock, 30, sharePlan{share: 10, overflow: true}},
		{"never beyond MaxPartitions", load(30, 3, 9, 0), 30, 0, ModeLock, 30, sharePlan{share: 10}},
		{"leader at capacity frees idle partitions for waiting work", load(9, 3, 2, 0), 3, 3, ModeLeader, 3, sharePlan{share: 3, handBackIdle: 2}},
		{"leader below capacity frees nothing", load(9, 3, 2, 1), 2, 2, ModeLeader, 8, sharePlan{share: 3, claim: 1}},
		{"lock mode frees no idle partitions", load(9, 3, 2, 0), 3, 3, ModeLock, 3, sharePlan{share: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := planShare(tc.load, tc.held, tc.idle, tc.mode, tc.max); got != tc.want {
				t.Fatalf("planShare = %+v, want %+v", got, tc.want)
			}
		})
	}
}

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
	keysOf := func(cs []partition.Candidate) (out []string) {
		for _, c := range cs {
			out = append(out, c.Key)
		}
		return out
	}
	got := d.skipLost([]partition.Candidate{{Key: "a", Version: 3}, {Key: "b", Version: 7}, {Key: "d", Version: 1}})
	if k := keysOf(got); !slices.Equal(k, []string{"b", "d"}) {
		t.Fatalf("kept %v, want b (moved on) and d (never lost)", k)
	}
	if _, ok := d.lostClaims["a"]; !ok || len(d.lostClaims) != 1 {
		t.Fatalf("remembered %v, want only a", d.lostClaims)
	}
	clock.Advance(10 * time.Second)
	if k := keysOf(d.skipLost([]partition.Candidate{{Key: "a", Version: 3}})); !slices.Equal(k, []string{"a"}) {
		t.Fatalf("after a lease's length kept %v, want a again", k)
	}
}
