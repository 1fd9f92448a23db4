package taskstore

import (
	"math"
	"sync"
	"time"
)

// Reading the claimable rows from a floor.
//
// A row's claimable_at is the time it became claimable (the
// tasks_claimable_since trigger sets it whoever makes the row so), or the
// end of its back-off. A claim removes the row from tasks_claimable, but
// while any transaction holds a snapshot from before the claim (a long
// report), the index entry stays, dead, and every read of the index's head
// would walk it. Keys grow with time and the earliest claimable rows are
// claimed first, so the dead entries pile up below the live ones. A Store
// therefore reads from a floor: a little (the margin, FloorMargin unless
// set by FloorPolicy) below the earliest claimable row its last read
// found, or the time of that read when it found none, so that a read walks
// only the entries of rows claimed in the last moments instead of all
// those since the snapshot was taken.
//
// A row lands below the floor when its claimable_at is earlier than a
// read's floor by the time its transaction commits: the transaction took
// longer than the margin from its update to its commit (a producer's long
// transaction, a synchronous standby or an fsync that stalls the commit),
// or the database's clock stepped back (a new primary whose clock is
// behind the old one's), or hand-written SQL backdated it. Three things
// bound how long it stays hidden:
//
//   - Every notification that makes rows claimable says when they became
//     so (NotifyPayload with a time: producers, releases, hand-backs,
//     retries, splits, rewinds), and a worker that hears one lowers its
//     floor (LowerFloor) to the margin below that time.
//   - A read that started before the floor was last lowered (its snapshot
//     may predate the commit that the lowering announced) never raises the
//     floor: it can only lower it.
//   - Once every full-read period (FloorPolicy; by the Store's own clock,
//     not the database's, so that a clock step there changes nothing), the
//     next read, of the candidates or of the fair share, starts from the
//     beginning, and sets the floor to the margin below the earliest
//     claimable row it found, lower or higher than it was.
//
// So a row committed at time c (by the Store's clock) is in the window of
// every read that starts after the first full read started after c ends,
// however long its commit took and whatever the database's clock did: that
// full read sees it (its snapshot is later than c) and puts the floor below
// it; no later read can raise the floor above it while it is claimable (a
// read started after that full read finds it or an earlier row; one
// started before cannot raise the floor at all); the next full reads
// find it again. The first full read after c starts at the first read at
// least one full-read period after the previous full read, which started
// at or before c.
//
// Correctness never depends on the floor: claims are compare-and-sets on
// the row whatever read found it, and an until-done run checks exactly
// (PendingWork) before it says all work is done.

// FloorMargin is how far below the earliest claimable row it last found a
// Store's next read of the claimable rows starts, unless set otherwise
// (FloorPolicy): longer than a release, a hand-back or a retry takes from
// its update to its commit.
const FloorMargin = 10 * time.Second

// FullReadEvery is how often, by default (FloorPolicy), a floored Store
// reads the claimable rows from the beginning all the same: the longest a
// row that landed below the floor, and that no notification announced,
// stays hidden.
const FullReadEvery = 30 * time.Second

// claimFloor is a Store's floor, shared by the copies WithDB and
// WithoutEvents make (Kind and FloorPolicy make a new one).
type claimFloor struct {
	margin time.Duration    // below the earliest row found
	every  time.Duration    // the full-read period
	now    func() time.Time // the clock the period is measured on

	mu       sync.Mutex
	at       time.Time // the floor, on the database's clock; zero: none
	lastFull time.Time // when the last full read started (f.now); zero: none yet
	// lowered counts the times the floor went down (a notification, a full
	// read): a read that started before the latest may not raise it.
	lowered uint64
}

func newClaimFloor(margin, every time.Duration, now func() time.Time) *claimFloor {
	return &claimFloor{margin: margin, every: every, now: now}
}

// floorRead is one read's start: the floor it passes to its statement
// ("-infinity" for a full read), whether that is a full read, and the
// lowering count it started under.
type floorRead struct {
	arg     string
	full    bool
	lowered uint64
}

// begin starts a read of the claimable rows: a full one when there is no
// floor yet or a full-read period has passed since the last one started.
func (f *claimFloor) begin() floorRead {
	if f == nil {
		return floorRead{arg: "-infinity", full: true}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	if f.at.IsZero() || f.lastFull.IsZero() || now.Sub(f.lastFull) >= f.every || now.Before(f.lastFull) {
		f.lastFull = now
		return floorRead{arg: "-infinity", full: true, lowered: f.lowered}
	}
	return floorRead{arg: f.at.UTC().Format(time.RFC3339Nano), lowered: f.lowered}
}

// saw moves the floor after read r, made at the database's time now, that
// found earliest as its earliest unowned claimable row (both in seconds
// since the Unix epoch; earliest is NaN for none, -Inf for a row made
// claimable by hand at '-infinity', which keeps the next read full).
// complete says the read was not cut short by its limit (one filled with
// stale rows says nothing of the unowned rows after them).
//
// A full read sets the floor, lower or higher; a floored read only raises
// it; a read that started before the floor was last lowered only lowers
// it.
func (f *claimFloor) saw(r floorRead, earliest, now float64, complete bool) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var to time.Time
	switch {
	case math.IsInf(earliest, -1):
		f.at = time.Time{}
		f.lowered++
		return
	case !math.IsNaN(earliest) && now != 0:
		to = epoch(min(earliest, now)).Add(-f.margin)
	case complete && now != 0:
		to = epoch(now).Add(-f.margin)
	default:
		if r.full && !complete {
			// Filled with stale rows, it said nothing of the unowned
			// ones: the next read is full again. (One that found nothing
			// at all found that none is below the floor.)
			f.lastFull = time.Time{}
		}
		return
	}
	stale := r.lowered != f.lowered
	switch {
	case !f.at.IsZero() && to.Before(f.at):
		if r.full || stale {
			f.at = to
			f.lowered++
		}
	case stale:
	case r.full:
		f.at = to
		// Reads that started before this one may have missed rows it
		// found: they may not raise the floor past them.
		f.lowered++
	case to.After(f.at):
		f.at = to
	}
}

// epoch converts seconds since the Unix epoch to a time, to the
// microsecond.
func epoch(s float64) time.Time { return time.UnixMicro(int64(math.Round(s * 1e6))) }

// lower moves the floor down to at least since - margin: rows became
// claimable then in a transaction that may have committed long after.
// Reads in flight may not raise it again.
func (f *claimFloor) lower(since time.Time) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lowered++
	if to := since.Add(-f.margin); !f.at.IsZero() && to.Before(f.at) {
		f.at = to
	}
}
