package distributor

import (
	"slices"
	"testing"
	"time"
)

func TestShareItems(t *testing.T) {
	for _, tc := range []struct {
		pending   []int64
		perMember int
		total     int
		want      []int
	}{
		// Little work: each takes all of its own.
		{[]int64{1, 1, 3}, 1000, 65536, []int{1, 1, 3}},
		// Large members share the total evenly.
		{[]int64{250000, 250000, 250000, 250000}, 250000, 65536, []int{16384, 16384, 16384, 16384}},
		// A small member takes all it has; the large ones share the rest.
		{[]int64{100000, 10, 100000}, 100000, 1010, []int{500, 10, 500}},
		// No member above the batch size.
		{[]int64{5000, 5000}, 1000, 65536, []int{1000, 1000}},
		// At least one item each, even past the total.
		{[]int64{7, 7, 7}, 1000, 2, []int{1, 1, 1}},
	} {
		got := shareItems(tc.pending, tc.perMember, tc.total)
		if !slices.Equal(got, tc.want) {
			t.Errorf("shareItems(%v, %d, %d) = %v, want %v", tc.pending, tc.perMember, tc.total, got, tc.want)
		}
	}
}

func TestSizerHalvesAndGrowsBack(t *testing.T) {
	s := newSizer(1000, 1000, 8000, 5*time.Second, time.Second)
	if l, ok := s.batchTooLong(1000, 300*time.Millisecond); !ok || l != 500 {
		t.Fatalf("after a batch of 1000 too long: limit %d ok %v, want 500 true", l, ok)
	}
	// The budget is now the 300 ms after which that batch failed: a batch
	// at the limit taking 100 ms (a third of it) does not let it grow...
	s.batchTook(500, 100*time.Millisecond)
	if l := s.batchLimit(); l != 500 {
		t.Fatalf("limit %d after a batch at a third of the budget, want 500", l)
	}
	// ...one taking less than a quarter does, up to the configured size.
	s.batchTook(500, 50*time.Millisecond)
	s.batchTook(1000, 50*time.Millisecond)
	if l := s.batchLimit(); l != 1000 {
		t.Fatalf("limit %d after quick batches, want 1000 (BatchSize)", l)
	}
	// A batch smaller than the limit says nothing about it.
	s.batchTooLong(1000, time.Second)
	s.batchTook(10, time.Millisecond)
	if l := s.batchLimit(); l != 500 {
		t.Fatalf("limit %d after a small batch, want 500", l)
	}
	// One item too long: nothing smaller to try.
	if _, ok := s.batchTooLong(1, time.Second); ok {
		t.Fatal("a single item too long was reported as retriable smaller")
	}
	if g := s.groupTooLong(8000, time.Second); g != 4000 {
		t.Fatalf("group limit %d after a group of 8000 too long, want 4000", g)
	}
	if g := s.groupTooLong(8000, time.Second); g != 4000 {
		t.Fatalf("group limit %d after a second report of the same group, want 4000 (never raised)", g)
	}
}

// Batches are sized by time: the bound starts low, doubles while batches
// that take all it allows are quick, stops at BatchSize, and halves after a
// batch slower than twice the target, never below where it started.
func TestSizerFollowsTheBatchTarget(t *testing.T) {
	s := newSizer(16384, 1000, 65536, 5*time.Second, time.Second)
	if l := s.batchLimit(); l != 1000 {
		t.Fatalf("first limit %d, want 1000", l)
	}
	// Quick but smaller than the bound (the partition had little left):
	// nothing learned.
	s.batchTook(400, 10*time.Millisecond)
	if l := s.batchLimit(); l != 1000 {
		t.Fatalf("limit %d after a small quick batch, want 1000", l)
	}
	// Quick at the bound: doubles, up to BatchSize.
	want := []int{2000, 4000, 8000, 16000, 16384, 16384}
	for _, w := range want {
		s.batchTook(s.batchLimit(), 100*time.Millisecond)
		if l := s.batchLimit(); l != w {
			t.Fatalf("limit %d after a quick batch at the bound, want %d", l, w)
		}
	}
	// Between half the target and twice it: stays.
	s.batchTook(16384, 700*time.Millisecond)
	s.batchTook(16384, 1900*time.Millisecond)
	if l := s.batchLimit(); l != 16384 {
		t.Fatalf("limit %d after batches near the target, want 16384", l)
	}
	// Slower than twice the target: halves, down to the start only.
	for _, w := range []int{8192, 4096, 2048, 1024, 1000, 1000} {
		s.batchTook(s.batchLimit(), 3*time.Second)
		if l := s.batchLimit(); l != w {
			t.Fatalf("limit %d after a slow batch, want %d", l, w)
		}
	}
	// A BatchSize below the start is the start, and never grows past it.
	s = newSizer(50, 1000, 65536, 5*time.Second, time.Second)
	s.batchTook(50, time.Millisecond)
	if l := s.batchLimit(); l != 50 {
		t.Fatalf("limit %d with BatchSize 50, want 50", l)
	}
}

// Groups are sized by time as batches are: the group bound halves after a
// group slower than twice the target (to half of what the group took, if
// that was less than the bound), never below where the batch bound
// starts, and doubles after quick groups that took all it allowed, up to
// ClaimGroupItems; a group near the target, or quick but under the bound,
// leaves it.
func TestSizerSizesGroupsByTheBatchTarget(t *testing.T) {
	s := newSizer(16384, 1000, 65536, 5*time.Second, time.Second)
	if g := s.groupLimit(); g != 65536 {
		t.Fatalf("first group limit %d, want 65536 (ClaimGroupItems)", g)
	}
	s.groupTook(65536, 1900*time.Millisecond)
	if g := s.groupLimit(); g != 65536 {
		t.Fatalf("group limit %d after a group near the target, want 65536", g)
	}
	// Slow, at the bound: halves.
	s.groupTook(65536, 3*time.Second)
	if g := s.groupLimit(); g != 32768 {
		t.Fatalf("group limit %d after a slow group at the bound, want 32768", g)
	}
	// Slow with fewer items than the bound (its members' own bounds
	// held it): half of what it took, so the next group is shorter.
	s.groupTook(6000, 3*time.Second)
	if g := s.groupLimit(); g != 3000 {
		t.Fatalf("group limit %d after a slow group of 6000, want 3000", g)
	}
	// Never below where the batch bound starts.
	s.groupTook(3000, 3*time.Second)
	s.groupTook(1000, 3*time.Second)
	if g := s.groupLimit(); g != 1000 {
		t.Fatalf("group limit %d after slow groups, want 1000 (the batch bound's start)", g)
	}
	// Quick but under the bound: nothing learned.
	s.groupTook(400, 10*time.Millisecond)
	if g := s.groupLimit(); g != 1000 {
		t.Fatalf("group limit %d after a small quick group, want 1000", g)
	}
	// Quick at the bound, but past a quarter of the budget: stays.
	s = newSizer(16384, 1000, 65536, 300*time.Millisecond, time.Second)
	s.groupTook(65536, 3*time.Second)
	s.groupTook(32768, 100*time.Millisecond)
	if g := s.groupLimit(); g != 32768 {
		t.Fatalf("group limit %d after a group at a third of the budget, want 32768", g)
	}
	// Quick at the bound: doubles back to ClaimGroupItems.
	for _, w := range []int{65536, 65536} {
		s.groupTook(s.groupLimit(), 50*time.Millisecond)
		if g := s.groupLimit(); g != w {
			t.Fatalf("group limit %d after a quick group at the bound, want %d", g, w)
		}
	}
	// ClaimGroupItems below the batch bound's start is the floor too.
	s = newSizer(16384, 1000, 500, 5*time.Second, time.Second)
	s.groupTook(500, 3*time.Second)
	if g := s.groupLimit(); g != 500 {
		t.Fatalf("group limit %d with ClaimGroupItems 500, want 500", g)
	}
}

// A group member takes the batch bound, or its even part of the group
// bound among ClaimGroup members when that is more, never more than
// BatchSize.
func TestMemberLimit(t *testing.T) {
	s := newSizer(16384, 1000, 65536, 5*time.Second, time.Second)
	if l := s.memberLimit(16); l != 4096 {
		t.Errorf("member bound of a new sizer, groups of 16: %d, want 4096 (65536 / 16)", l)
	}
	if l := s.memberLimit(2); l != 16384 {
		t.Errorf("member bound, groups of 2: %d, want 16384 (BatchSize)", l)
	}
	if l := s.memberLimit(0); l != 16384 {
		t.Errorf("member bound, no group size: %d, want 16384 (BatchSize)", l)
	}
	// The group bound halved by a slow group: the batch bound decides.
	for range 3 {
		s.groupTook(s.groupLimit(), 3*time.Second)
	}
	if l := s.memberLimit(16); l != 1000 {
		t.Errorf("member bound after slow groups (group bound %d): %d, want 1000 (the batch bound)", s.groupLimit(), l)
	}
	// A batch bound grown past the group's even part decides.
	for range 4 {
		s.batchTook(s.batchLimit(), time.Millisecond)
	}
	if l, b := s.memberLimit(16), s.batchLimit(); l != b || b != 16000 {
		t.Errorf("member bound %d with the batch bound at %d, want both 16000", l, b)
	}
}
