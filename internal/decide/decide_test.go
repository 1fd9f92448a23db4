package decide

import (
	"github.com/batonhq/baton/internal/leaseinfo"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/taskstore"
)

func TestPlanShare(t *testing.T) {
	load := func(busy, live, unclaimed, wanted int) taskstore.Load {
		return taskstore.Load{Busy: busy, LiveWorkers: live, Unclaimed: unclaimed, Wanted: wanted}
	}
	weighed := func(l taskstore.Load, backlog, self int64) taskstore.Load {
		l.Backlog, l.SelfBacklog = backlog, self
		return l
	}
	for _, tc := range []struct {
		name       string
		load       taskstore.Load
		held, idle int
		leader     bool
		max        int
		want       Share
	}{
		{"alone takes up to MaxPartitions", load(20, 1, 20, 0), 0, 0, false, 8, Share{Share: 8, Claim: 8, Overflow: true}},
		{"no work still allows one", load(0, 3, 0, 0), 0, 0, false, 8, Share{Share: 1, Claim: 1}},
		{"ceil of busy over live", load(10, 3, 10, 4), 1, 0, false, 8, Share{Share: 4, Claim: 3}},
		{"capped by MaxPartitions", load(100, 2, 50, 8), 0, 0, false, 8, Share{Share: 8, Claim: 8}},
		{"surplus handed back to a worker that wants it", load(12, 3, 0, 2), 6, 0, false, 12, Share{Share: 4, HandBack: 2}},
		{"no more handed back than is wanted", load(12, 3, 0, 1), 6, 0, false, 12, Share{Share: 4, HandBack: 1}},
		{"surplus kept while work is unclaimed", load(12, 3, 2, 2), 6, 0, false, 12, Share{Share: 4}},
		{"surplus kept when nobody wants more", load(12, 3, 0, 0), 6, 0, false, 12, Share{Share: 4}},
		{"unclaimed work nobody wants may be taken beyond the share", load(30, 3, 9, 0), 10, 0, false, 30, Share{Share: 10, Overflow: true}},
		{"never beyond MaxPartitions", load(30, 3, 9, 0), 30, 0, false, 30, Share{Share: 10}},
		{"leader at capacity frees idle partitions for waiting work", load(9, 3, 2, 0), 3, 3, true, 3, Share{Share: 3, HandBackIdle: 2}},
		{"leader below capacity frees nothing", load(9, 3, 2, 1), 2, 2, true, 8, Share{Share: 3, Claim: 1}},
		{"lock mode frees no idle partitions", load(9, 3, 2, 0), 3, 3, false, 3, Share{Share: 3}},
		// Weighted by backlog: 1,000,000 items pending among 2 workers.
		{"holding its share of the backlog claims no more", weighed(load(40, 2, 38, 8), 1_000_000, 900_000), 1, 0, false, 8,
			Share{Share: 1}},
		{"holding exactly its share of the backlog claims no more", weighed(load(40, 2, 38, 8), 1_000_000, 500_000), 2, 0, false, 8,
			Share{Share: 2}},
		{"below its share of the backlog claims its count-share", weighed(load(40, 2, 38, 8), 1_000_000, 499_999), 2, 0, false, 8,
			Share{Share: 8, Claim: 6}},
		{"holding nothing claims whatever the backlog says", weighed(load(40, 2, 38, 8), 1_000_000, 900_000), 0, 0, false, 8,
			Share{Share: 8, Claim: 8}},
		{"backlog never hands back", weighed(load(12, 3, 0, 2), 100, 100), 6, 0, false, 12, Share{Share: 4, HandBack: 2}},
		{"backlog-served work nobody wants still overflows", weighed(load(40, 2, 38, 0), 1_000_000, 900_000), 1, 0, false, 8,
			Share{Share: 1, Overflow: true}},
		{"alone, backlog does not count", weighed(load(20, 1, 19, 0), 100, 100), 1, 0, false, 8, Share{Share: 8, Claim: 7, Overflow: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PlanShare(tc.load, tc.held, tc.idle, tc.leader, tc.max); got != tc.want {
				t.Fatalf("PlanShare = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestWanted(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		share, max, occupied  int
		overflow, handingBack bool
		want, room            int
	}{
		{"below the share", 4, 8, 1, false, false, 3, 7},
		{"at the share: room for a dead worker's only", 4, 8, 4, false, false, 0, 4},
		{"above the share", 2, 8, 5, false, false, -3, 3},
		{"share above MaxPartitions", 12, 8, 2, false, false, 6, 6},
		{"overflow wants all its room", 2, 8, 2, true, false, 6, 6},
		{"handing back wants nothing", 4, 8, 1, true, true, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, room := Wanted(tc.share, tc.max, tc.occupied, tc.overflow, tc.handingBack)
			if want != tc.want || room != tc.room {
				t.Fatalf("Wanted = %d, %d; want %d, %d", want, room, tc.want, tc.room)
			}
		})
	}
}

func TestOverflowAllowed(t *testing.T) {
	for _, tc := range []struct {
		overflow bool
		lasted   time.Duration
		want     bool
	}{
		{false, time.Hour, false},
		{true, 9 * time.Second, false},
		{true, 10 * time.Second, true},
	} {
		if got := OverflowAllowed(tc.overflow, tc.lasted, 10*time.Second); got != tc.want {
			t.Errorf("OverflowAllowed(%v, %s) = %v, want %v", tc.overflow, tc.lasted, got, tc.want)
		}
	}
}

type cand struct {
	key   string
	owned bool
}

func owned(c cand) bool { return c.owned }

func keys(cs []cand) (out []string) {
	for _, c := range cs {
		out = append(out, c.key)
	}
	return out
}

func TestPickClaims(t *testing.T) {
	u := func(k string) cand { return cand{key: k} }
	o := func(k string) cand { return cand{key: k, owned: true} }
	for _, tc := range []struct {
		name       string
		cands      []cand
		want, room int
		try, rest  []string
	}{
		{"below share takes unowned up to want", []cand{u("a"), u("b"), u("c")}, 2, 5, []string{"a", "b"}, []string{"c"}},
		{"at share takes only a dead worker's", []cand{u("a"), o("b"), u("c"), o("d")}, 0, 5, []string{"b", "d"}, []string{"a", "c"}},
		{"dead worker's beyond want, within room", []cand{o("a"), o("b"), u("c")}, 1, 3, []string{"a", "b", "c"}, nil},
		{"room caps everything", []cand{o("a"), o("b"), u("c")}, 1, 2, []string{"a", "b"}, []string{"c"}},
		{"no room", []cand{o("a")}, 0, 0, nil, []string{"a"}},
		{"negative want (above the share) takes no unowned", []cand{u("a"), o("b")}, -2, 3, []string{"b"}, []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			try, rest := PickClaims(tc.cands, owned, tc.want, tc.room)
			if !slices.Equal(keys(try), tc.try) || !slices.Equal(keys(rest), tc.rest) {
				t.Fatalf("PickClaims = %v, %v; want %v, %v", keys(try), keys(rest), tc.try, tc.rest)
			}
		})
	}
}

func TestPickRiders(t *testing.T) {
	type c struct {
		key     string
		owned   bool
		backlog int64
	}
	eligible := func(x c) bool { return !x.owned }
	backlog := func(x c) int64 { return x.backlog }
	names := func(cs []c) []string {
		var out []string
		for _, x := range cs {
			out = append(out, x.key)
		}
		return out
	}
	cands := []c{{"a", false, 10}, {"owned", true, 5}, {"big", false, 500}, {"empty", false, 0}, {"b", false, 20}, {"c", false, 30}, {"d", false, 1}}
	for _, tc := range []struct {
		name          string
		n             int
		member, items int64
		riders, rest  []string
	}{
		{"small unowned ones with work, in order, up to n", 2, 100, 1000,
			[]string{"a", "b"}, []string{"owned", "big", "empty", "c", "d"}},
		{"a backlog above the member bound stays", 10, 499, 1000,
			[]string{"a", "b", "c", "d"}, []string{"owned", "big", "empty"}},
		{"the items left bound the sum, later smaller ones still fit", 10, 1000, 35,
			[]string{"a", "b", "d"}, []string{"owned", "big", "empty", "c"}},
		{"none wanted", 0, 1000, 1000, nil, []string{"a", "owned", "big", "empty", "b", "c", "d"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			riders, rest := PickRiders(cands, eligible, backlog, tc.n, tc.member, tc.items)
			if !slices.Equal(names(riders), tc.riders) || !slices.Equal(names(rest), tc.rest) {
				t.Fatalf("PickRiders = %v, %v; want %v, %v", names(riders), names(rest), tc.riders, tc.rest)
			}
		})
	}
}

func TestStaleFirst(t *testing.T) {
	cs := []cand{{"a", false}, {"b", true}, {"c", false}, {"d", true}}
	StaleFirst(cs, owned)
	if got := keys(cs); !slices.Equal(got, []string{"b", "d", "a", "c"}) {
		t.Fatalf("StaleFirst = %v, want the owned ones first, each group in its order", got)
	}
}

func TestReadLimits(t *testing.T) {
	if got := StaleReadLimit(3); got != 20 {
		t.Errorf("StaleReadLimit(3) = %d, want 20", got)
	}
	if got := HeadReadLimit(2, 5, 8); got != 4*2+8+5+16 {
		t.Errorf("HeadReadLimit = %d", got)
	}
	for _, tc := range []struct {
		want, stale, room int
		read              bool
	}{{1, 0, 3, true}, {0, 0, 3, false}, {2, 3, 3, false}, {2, 2, 3, true}} {
		if got := ReadHead(tc.want, tc.stale, tc.room); got != tc.read {
			t.Errorf("ReadHead(%d, %d, %d) = %v, want %v", tc.want, tc.stale, tc.room, got, tc.read)
		}
	}
}

// The staleness rule: a row past its lease is stale only if its owner is
// not live; a live owner hands it back itself.
func TestStaleness(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		pending, quarantined bool
		leaseLeft            time.Duration
		regLeft              time.Duration
		stopped              bool
		claimable, stale     bool
	}{
		{"lease running", true, false, time.Second, -time.Second, false, false, false},
		{"lease ended, owner live", true, false, 0, time.Second, false, true, false},
		{"lease ended, registration expired", true, false, -time.Millisecond, -time.Millisecond, false, true, true},
		{"lease ended, owner stopped", true, false, -time.Second, time.Second, true, true, true},
		{"no pending work", false, false, -time.Second, -time.Second, false, false, false},
		{"quarantined", true, true, -time.Second, -time.Second, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Claimable(tc.pending, tc.quarantined, tc.leaseLeft)
			if c != tc.claimable {
				t.Fatalf("Claimable = %v, want %v", c, tc.claimable)
			}
			if s := Stale(c, Live(tc.regLeft, tc.stopped)); s != tc.stale {
				t.Fatalf("Stale = %v, want %v", s, tc.stale)
			}
		})
	}
	for _, tc := range []struct {
		listed bool
		left   time.Duration
		want   bool
	}{{false, 0, true}, {false, -time.Second, true}, {false, time.Millisecond, false}, {true, -time.Second, false}} {
		if got := HandBack(tc.listed, tc.left); got != tc.want {
			t.Errorf("HandBack(%v, %s) = %v, want %v", tc.listed, tc.left, got, tc.want)
		}
	}
}

func TestRenewal(t *testing.T) {
	for _, tc := range []struct {
		stale, hb, margin, want time.Duration
	}{
		{10 * time.Second, time.Second, 2 * time.Second, 8 * time.Second},
		// Tight timings: never below margin + 2 beats, so every beat renews.
		{time.Second, 300 * time.Millisecond, 200 * time.Millisecond, 800 * time.Millisecond},
	} {
		if got := RenewBelow(tc.stale, tc.hb, tc.margin); got != tc.want {
			t.Errorf("RenewBelow(%s, %s, %s) = %s, want %s", tc.stale, tc.hb, tc.margin, got, tc.want)
		}
	}
	if !Rewrite(7*time.Second, 8*time.Second) || Rewrite(8*time.Second, 8*time.Second) {
		t.Error("Rewrite: a lease is rewritten exactly when it has less than the threshold left")
	}
	ttl := 10 * time.Second
	for _, tc := range []struct {
		r    leaseinfo.Renewal
		want time.Duration
	}{
		{leaseinfo.Renewal{Remaining: 3 * time.Second}, ttl},
		{leaseinfo.Renewal{Fresh: true, Remaining: 9 * time.Second}, 9 * time.Second},
		{leaseinfo.Renewal{Locked: true, Remaining: 2 * time.Second}, 2 * time.Second},
	} {
		if got := LeaseLeft(tc.r, ttl); got != tc.want {
			t.Errorf("LeaseLeft(%+v) = %s, want %s", tc.r, got, tc.want)
		}
	}
	if got := DeadlineIn(10*time.Second, 2*time.Second); got != 8*time.Second {
		t.Errorf("DeadlineIn = %s", got)
	}
	if Confirmed(2, 3) || !Confirmed(3, 3) {
		t.Error("Confirmed: a takeover is confirmed at exactly Confirm consecutive beats")
	}
}

func TestBackoff(t *testing.T) {
	for _, tc := range []struct {
		failures int
		want     time.Duration
	}{{0, time.Second}, {1, 2 * time.Second}, {2, 4 * time.Second}, {3, 5 * time.Second}, {200, 5 * time.Second}} {
		if got := Backoff(time.Second, 5*time.Second, tc.failures); got != tc.want {
			t.Errorf("Backoff after %d failures = %s, want %s", tc.failures, got, tc.want)
		}
	}
	if got := ClaimRetryDelay(time.Second, time.Minute, 3*time.Second, 4); got != 3*time.Second {
		t.Errorf("ClaimRetryDelay = %s, want the poll interval", got)
	}
	if Quarantine(2, 3) || !Quarantine(3, 3) {
		t.Error("Quarantine: at exactly MaxAttempts")
	}
	if !RetryTransient(2, 3) || RetryTransient(3, 3) {
		t.Error("RetryTransient: below MaxAttempts retries")
	}
}

func TestNewest(t *testing.T) {
	t0 := time.Unix(0, 0)
	type h struct {
		k  string
		at time.Time
	}
	hs := []h{{"a", t0}, {"b", t0.Add(2 * time.Second)}, {"c", t0.Add(time.Second)}}
	Newest(hs, func(x h) time.Time { return x.at })
	if hs[0].k != "b" || hs[1].k != "c" || hs[2].k != "a" {
		t.Fatalf("Newest = %v", hs)
	}
	type v struct {
		k  string
		at time.Duration
	}
	vs := []v{{"a", 1}, {"b", 3}, {"c", 2}}
	NewestDur(vs, func(x v) time.Duration { return x.at })
	if vs[0].k != "b" || vs[1].k != "c" || vs[2].k != "a" {
		t.Fatalf("NewestDur = %v", vs)
	}
}

// A dead worker's partitions not yet past the spread wait count against
// the share like unowned ones; once past it, only against room.
func TestTakeBeyondShare(t *testing.T) {
	if TakeBeyondShare(time.Second, 2*time.Second) || !TakeBeyondShare(2*time.Second, 2*time.Second) {
		t.Error("TakeBeyondShare: after the wait, not before")
	}
	if !TakeBeyondShare(0, -1) {
		t.Error("TakeBeyondShare: at once when takeovers are not spread")
	}
	type c struct {
		k      string
		stale  bool
		beyond bool
	}
	cands := []c{{"s1", true, false}, {"s2", true, false}, {"s3", true, true}, {"s4", true, false}, {"f1", false, false}}
	try, rest := PickClaims(cands, func(x c) bool { return x.stale && x.beyond }, 2, 6)
	var got []string
	for _, x := range try {
		got = append(got, x.k)
	}
	if want := []string{"s1", "s2", "s3"}; !slices.Equal(got, want) || len(rest) != 2 {
		t.Fatalf("PickClaims with want 2 = %v (rest %d); want %v: two within the share, the one past its wait beyond it", got, len(rest), want)
	}
}

// The wait before a stale row is taken beyond the share starts when it is
// first seen at its version, on a virtual clock as on a real one.
func TestSightStale(t *testing.T) {
	since := func(now time.Duration) func(time.Duration) time.Duration {
		return func(at time.Duration) time.Duration { return now - at }
	}
	seen, beyond, first := SightStale[int, time.Duration](nil, []int{1, 2}, []int64{3, 4}, 10, since(10), 5)
	if len(beyond) != 0 || !first[1] || !first[2] || len(seen) != 2 {
		t.Fatalf("first sight: seen %v, beyond %v, first %v", seen, beyond, first)
	}
	seen, beyond, first = SightStale(seen, []int{1, 2}, []int64{3, 6}, 15, since(15), 5)
	if !beyond[1] || beyond[2] || len(first) != 1 || !first[2] || seen[2].At != 15 {
		t.Fatalf("after the wait: seen %v, beyond %v, first %v; want 1 beyond, 2 seen afresh at its new version", seen, beyond, first)
	}
	if seen, _, _ = SightStale(seen, []int{2}, []int64{6}, 16, since(16), 5); len(seen) != 1 {
		t.Fatalf("rows no longer stale kept: %v", seen)
	}
}

func TestWithinBacklogShare(t *testing.T) {
	type bc struct {
		key     string
		owned   bool
		backlog int64
	}
	u := func(k string, n int64) bc { return bc{key: k, backlog: n} }
	seg := func(n int) []bc {
		out := make([]bc, n)
		for i := range out {
			out[i] = u(string(rune('a'+i)), 100)
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		cands  []bc
		self   int64
		others int64
		live   int
		keep   string
	}{
		{"idle worker takes half of ten equal segments", seg(10), 0, 0, 2, "abcde"},
		{"the other then takes half of what is left, a tie rounded up", seg(5), 0, 0, 2, "abc"},
		{"the other, once the first's claims show, takes the rest", seg(5), 0, 500, 2, "abcde"},
		{"holding its part already, none", seg(4), 400, 0, 2, ""},
		{"holding 4 of 10 while the other holds 4: one of the last 2", seg(2), 400, 400, 2, "a"},
		{"holding 5 while the other holds 4: none of the last 1", seg(1), 500, 400, 2, ""},
		{"holding 4 while the other holds 5: the last 1", seg(1), 400, 500, 2, "a"},
		{"40 below its part: no segment of 100, which would take it 60 above", seg(2), 470, 350, 2, ""},
		{"below its part, at least the first, however large", []bc{u("big", 1000), u("s", 10)}, 0, 0, 2, "big"},
		{"smaller ones that fit are kept past one that does not", []bc{u("a", 300), u("b", 500), u("c", 200)}, 0, 0, 2, "ac"},
		{"exempt ones (a dead worker's, not a segment) are kept whatever the backlog", []bc{{"x", true, 1000}, u("a", 100), u("b", 100)}, 1000, 0, 2, "x"},
		{"alone: all", seg(4), 1000, 0, 1, "abcd"},
		{"no backlog known: all", []bc{u("a", 0), u("b", 0)}, 50, 0, 2, "ab"},
		{"three workers: a third", seg(9), 0, 0, 3, "abc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := WithinBacklogShare(tc.cands, func(c bc) bool { return c.owned }, func(c bc) int64 { return c.backlog }, tc.self, tc.others, tc.live)
			var ks []string
			for _, c := range got {
				ks = append(ks, c.key)
			}
			if strings.Join(ks, "") != tc.keep {
				t.Fatalf("WithinBacklogShare kept %v, want %q", ks, tc.keep)
			}
		})
	}
}
