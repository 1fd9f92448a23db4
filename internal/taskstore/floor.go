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
// therefore reads from a floor: a little (FloorMargin) below the earliest
// claimable row its last read found, or the time of that read when it
// found none, so that a read walks only the entries of rows claimed in
// the last moments instead of all those since the snapshot was taken.
//
// A row is missed by a floored read only if it became claimable more than
// FloorMargin before the transaction that made it so committed, and after
// a read had set the floor above that time: a producer's long transaction,
// or hand-written SQL that backdates it. Producers through this package
// say when in their notification (NotifyPayload), and a worker that hears
// one lowers its floor (LowerFloor); every fullReadEvery reads, the next
// read starts from the beginning instead, so such a row waits at most that
// many reads.
// Correctness never depends on the floor: claims are compare-and-sets on
// the row whatever read found it, and an until-done run checks exactly
// (PendingWork) before it says all work is done.

// FloorMargin is how far below the earliest claimable row it last found a
// Store's next read of the claimable rows starts: longer than a release,
// a hand-back or a retry takes from its update to its commit.
const FloorMargin = 10 * time.Second

// fullReadEvery is how often a floored Store reads the claimable rows
// from the beginning all the same.
const fullReadEvery = 256

// claimFloor is a Store's floor, shared by the copies WithDB and
// WithoutEvents make (Kind makes a new one). The zero value reads from the
// beginning.
type claimFloor struct {
	mu     sync.Mutex
	at     time.Time // the floor, on the database's clock; zero: none
	reads  int       // reads since the last full one
	margin time.Duration
}

func newClaimFloor() *claimFloor { return &claimFloor{margin: FloorMargin} }

// arg is the floor the next read passes to the statement: "-infinity" for
// a full read.
func (f *claimFloor) arg() string {
	if f == nil {
		return "-infinity"
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if f.at.IsZero() || f.reads >= fullReadEvery {
		f.reads = 0
		return "-infinity"
	}
	return f.at.UTC().Format(time.RFC3339Nano)
}

// current is the floor for a read that does not move it (the fair share):
// "-infinity" when there is none.
func (f *claimFloor) current() string {
	if f == nil {
		return "-infinity"
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.at.IsZero() {
		return "-infinity"
	}
	return f.at.UTC().Format(time.RFC3339Nano)
}

// saw moves the floor after a read at the database's time now that found
// earliest as its earliest unowned claimable row (both in seconds since
// the Unix epoch; earliest is NaN for none, -Inf for a row made claimable
// by hand at '-infinity', which keeps the next read full). complete says
// the read was not cut short by its limit (one filled with stale rows
// says nothing of the unowned rows after them).
func (f *claimFloor) saw(earliest, now float64, complete bool) {
	if f == nil || now == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var to float64
	switch {
	case math.IsInf(earliest, -1):
		f.at = time.Time{}
		return
	case !math.IsNaN(earliest):
		to = min(earliest, now)
	case complete:
		to = now
	default:
		return
	}
	at := epoch(to).Add(-f.margin)
	if at.After(f.at) {
		f.at = at
	}
}

// epoch converts seconds since the Unix epoch to a time, to the
// microsecond.
func epoch(s float64) time.Time { return time.UnixMicro(int64(math.Round(s * 1e6))) }

// lower moves the floor down to at least since - margin: rows became
// claimable then in a transaction that may have committed long after.
func (f *claimFloor) lower(since time.Time) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if to := since.Add(-f.margin); !f.at.IsZero() && to.Before(f.at) {
		f.at = to
	}
}
