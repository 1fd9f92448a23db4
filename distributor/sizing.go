package distributor

import (
	"slices"
	"sync"
	"time"
)

// Transactions are sized in work items and by time. A batch takes at most
// the current batch bound, which the worker sizes by how long batches take:
// it starts at min(BatchSize, 1000) items, doubles after a batch that
// took all the items the bound allowed and committed in less than half of
// BatchTarget, up to BatchSize, and halves (down to where it started) after
// a batch that took more than twice BatchTarget. Every batch pays a fixed
// cost (a transaction with its fence, read, checkpoint and WAL flush, and a
// COPY's setup, which on PostgreSQL 15 grows with the square of the rows it
// buffers, up to 1,000); batches grown to the target make that cost small
// per item without holding a partition's row, a rebalance or a graceful
// stop for long. The bound is the worker's, shared by its partitions:
// batches that run together on the same database take about as long.
//
// A group of first batches, or of held partitions' batches, takes at most
// the current group bound in all, each member at most the member bound:
// the batch bound, or the group bound's even part among ClaimGroup members
// when that is more (never more than BatchSize), so that a group's
// members catch up in as few transactions as a full group allows rather
// than climbing the batch bound from where it starts (contracts of 2,500
// records, claimed 8 to a group by a new worker, took several
// transactions each at first, members held to 1,000 items, and the slots
// they held came free one by one). The
// group bound is sized by time as the batch bound is, from the groups'
// durations, so that a group, which holds all its members' rows until it
// commits, keeps to BatchTarget as a lone batch does: it starts at
// ClaimGroupItems, halves after a group that took more than twice
// BatchTarget (half of what that group took, if it took less than the
// bound: members are also held to the batch bound and to their backlogs),
// down to where the batch bound starts, and doubles, up to
// ClaimGroupItems, after a group that took all the bound allowed and
// committed in less than half of BatchTarget. A held group also counts as
// one batch of its largest member's items for the batch bound, so a slow
// group lowers its members' bound as well. Both are also lowered when a transaction
// turns out too long for the database's statement timeout or for the lease
// (dberr.TooLong): the transaction rolls back, the bound that applied is
// halved, and the work is tried again at once, so that any BatchSize
// finishes. A bound lowered this way grows back (doubling, up to the
// configured value) after a transaction at the bound took less than a
// quarter of the time budget, so that a passing slowdown (a report on the
// same database) does not cost speed for the rest of the run, while a
// bound that keeps failing stays low. The budget starts at StaleAfter/2
// (the statement timeout that ConnectionLimits recommends) and becomes the
// shortest time after which a transaction was found too long, whatever
// limit the server applied.

// batchStart is where the batch bound starts when BatchSize is larger.
const batchStart = 1000

// sizer holds the worker's current bounds on transaction size.
type sizer struct {
	maxBatch, maxGroup int
	// floor is where the batch bound starts, and the lowest a slow batch
	// (not one too long) takes it to.
	floor int
	// target is the time a batch should take (Config.BatchTarget).
	target time.Duration

	mu    sync.Mutex
	batch int // items per batch, at most maxBatch
	group int // items per group of first batches, at most maxGroup
	// budget: a transaction at the bound that took less than a quarter of
	// it lets the bound double.
	budget time.Duration
}

func newSizer(maxBatch, start, maxGroup int, budget, target time.Duration) *sizer {
	start = max(1, min(start, maxBatch))
	return &sizer{maxBatch: maxBatch, maxGroup: maxGroup, floor: start, target: target, budget: budget,
		batch: start, group: maxGroup}
}

// batchLimit is the most items a batch may take now.
func (s *sizer) batchLimit() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.batch
}

// start is where the batch bound starts (and the lowest a slow batch
// takes it to): batches smaller than this are dominated by their fixed
// cost.
func (s *sizer) start() int { return s.floor }

// memberLimit is the most items one member of a group may take now: the
// batch bound, or claimGroup members' even part of the group bound when
// that is more, at most maxBatch. A full group takes no more than the
// group bound either way.
func (s *sizer) memberLimit(claimGroup int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return max(s.batch, min(s.maxBatch, s.group/max(1, claimGroup)))
}

// groupLimit is the most items a group (of first batches, or of held
// partitions' batches) may take now.
func (s *sizer) groupLimit() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.group
}

// batchTooLong records that a batch of tried items was found too long
// after elapsed, and returns the new bound: half of tried (at least 1), if
// that is lower than the current one. ok is false when tried was a single
// item: nothing smaller can be tried.
func (s *sizer) batchTooLong(tried int, elapsed time.Duration) (limit int, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shorten(elapsed)
	if tried <= 1 {
		return s.batch, false
	}
	s.batch = min(s.batch, max(1, tried/2))
	return s.batch, true
}

// groupTooLong records that a group of tried items was found too long
// after elapsed, and returns the new bound.
func (s *sizer) groupTooLong(tried int, elapsed time.Duration) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shorten(elapsed)
	s.group = min(s.group, max(1, tried/2))
	return s.group
}

// shorten lowers the budget to elapsed, a time after which a transaction
// was found too long. Called with s.mu.
func (s *sizer) shorten(elapsed time.Duration) {
	if elapsed > 0 {
		s.budget = min(s.budget, elapsed)
	}
}

// batchTook records a batch of items that committed after elapsed: one
// that took all the bound allowed and was quick lets the bound double; one
// slower than twice the target halves it, down to where it started.
func (s *sizer) batchTook(items int, elapsed time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case elapsed > 2*s.target && s.batch > s.floor:
		s.batch = max(s.floor, s.batch/2)
	case s.batch < s.maxBatch && items >= s.batch && elapsed < s.budget/4 && elapsed < s.target/2:
		s.batch = min(s.maxBatch, 2*s.batch)
	}
}

// groupTook is batchTook for a group (of first batches, or of held
// partitions' batches) of items that committed after elapsed: one slower
// than twice the target halves the group bound, or what the group took if
// that is less, down to where the batch bound starts; one that took all
// the bound allowed and was quick lets it double, up to ClaimGroupItems.
func (s *sizer) groupTook(items int, elapsed time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	floor := min(s.floor, s.maxGroup)
	switch {
	case elapsed > 2*s.target && s.group > floor:
		s.group = max(floor, min(s.group, items)/2)
	case s.group < s.maxGroup && items >= s.group && elapsed < s.budget/4 && elapsed < s.target/2:
		s.group = min(s.maxGroup, 2*s.group)
	}
}

// shareItems splits total items among members that each have pending[i]
// items left, taking at most perMember from one: water-filling, so a member
// with little work takes all of it and the rest is shared evenly. Every
// member gets at least one item (a group has no more members than total).
func shareItems(pending []int64, perMember, total int) []int {
	out := make([]int, len(pending))
	order := make([]int, len(pending))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case pending[a] < pending[b]:
			return -1
		case pending[a] > pending[b]:
			return 1
		}
		return 0
	})
	left := total
	for n, i := range order {
		fair := max(1, left/(len(order)-n))
		out[i] = int(min(pending[i], int64(perMember), int64(fair)))
		out[i] = max(1, out[i])
		left -= out[i]
	}
	return out
}
