package distributor

import (
	"context"
	"slices"
	"sync"

	"github.com/batonhq/baton/internal/dberr"
)

// Held groups: the batches of several held partitions of one worker,
// committed in one transaction (GroupProcessor, Config.ClaimGroup > 1).
// No timer decides when a group forms. A held partition's loop about to
// run a batch runs it at once, alone (batch.go), unless a batch
// transaction of another held partition of this worker is in flight: then
// it queues its batch. When a transaction in flight ends, the queue (up to
// ClaimGroup members, and no more than the group's items allow at one each)
// runs as one transaction, led by the first member's own goroutine, while
// later arrivals queue behind it. So a worker whose partitions are busy
// runs one batch transaction at a time, each carrying the batches of all
// the partitions that became ready meanwhile, and a lone partition's batch
// starts exactly when it did before.
//
// The group's transaction fences every member (Store.Fence, each by its
// own lease version and owner, in partition_key order), hands the members
// to ProcessGroup, advances every checkpoint (the compare-and-set of a
// lone batch, in the same order), releases the members that caught up in
// lock mode (and caught-up segments in leader mode) in one statement, and
// commits once. A member lost at the fence drops out and its loop sees
// the fence's error, as after a lone batch's fence. A member found caught
// up at the fence gets the lone batch's answer (caught up, nothing done).
// A member that would be split (split.go) runs its batch alone after the
// group. Any other failure rolls the whole group back and each member then
// runs its batch alone, so that a processor error, a batch too long or a
// transient error is met, counted and retried by the partition that causes
// it. The group's context ends when any member's lease context does (that
// member's fence would fail the commit anyway, so there is no point in
// going on): the group rolls back and the others go on alone. Only
// partitions whose claim has committed a batch already (held.started) take
// part: a takeover's first batch, which records its history and links its
// trace to the previous owner's, always runs alone.
//
// The group's batches take at most the group bound in all (at most
// ClaimGroupItems), shared among the members as for a group of first
// batches (shareItems: each at most the member bound), and feed the same
// sizer, by time as lone batches do (sizing.go): the group bound by the
// group's items and duration, so that a slow group makes the next one
// smaller and quick ones grow it back, and the batch bound once per
// group, by its largest member's items and the group's duration.

// heldQueue is the worker's held-batch transactions in flight and the
// batches waiting for them.
type heldQueue struct {
	mu       sync.Mutex
	inFlight int
	waiting  []*queuedBatch
}

// queuedBatch is a held partition's batch waiting for the transaction in
// flight to end.
type queuedBatch struct {
	h    *held
	turn chan heldTurn // buffered (1): whoever sends never waits
}

// heldTurn is what a queued batch is told when its wait ends.
type heldTurn struct {
	// lead: run these members (this batch first) as one transaction,
	// counted in flight already.
	lead []*queuedBatch
	// alone: run the batch on its own (the group failed, or the member
	// would split).
	alone bool
	// res is the batch's outcome in a group that another member led.
	res heldResult
}

// heldResult is a batch's outcome, as batch returns it.
type heldResult struct {
	items              int64
	caughtUp, released bool
	err                error
}

// heldBatch runs h's next batch: alone at once when no other held batch
// of the worker is in flight (or groups are off, or h must run alone),
// otherwise with the batches queued meanwhile, in one transaction.
func (d *Distributor) heldBatch(h *held) (items int64, caughtUp, released bool, err error) {
	gp, ok := d.proc.(GroupProcessor)
	q := &d.heldQ
	if !ok || d.cfg.ClaimGroup < 2 || !h.started {
		q.mu.Lock()
		q.inFlight++
		q.mu.Unlock()
		defer d.heldBatchEnded()
		return d.batch(h)
	}
	q.mu.Lock()
	if q.inFlight == 0 {
		q.inFlight++
		q.mu.Unlock()
		defer d.heldBatchEnded()
		return d.batch(h)
	}
	qb := &queuedBatch{h: h, turn: make(chan heldTurn, 1)}
	q.waiting = append(q.waiting, qb)
	q.mu.Unlock()
	var t heldTurn
	lctx := h.lease.Context()
	select {
	case t = <-qb.turn:
	case <-lctx.Done():
		q.mu.Lock()
		if i := slices.Index(q.waiting, qb); i >= 0 {
			q.waiting = slices.Delete(q.waiting, i, i+1)
			q.mu.Unlock()
			return 0, false, false, context.Cause(lctx)
		}
		q.mu.Unlock()
		// Taken into a group already: its context ends with this lease,
		// and its leader answers at once.
		t = <-qb.turn
	}
	switch {
	case t.lead != nil:
		defer d.heldBatchEnded()
		r := d.runHeldGroup(gp, t.lead)
		return r.items, r.caughtUp, r.released, r.err
	case t.alone:
		q.mu.Lock()
		q.inFlight++
		q.mu.Unlock()
		defer d.heldBatchEnded()
		return d.batch(h)
	}
	return t.res.items, t.res.caughtUp, t.res.released, t.res.err
}

// heldBatchEnded counts a held batch's transaction out, and hands the
// batches queued meanwhile to the first of them, to run as one group.
func (d *Distributor) heldBatchEnded() {
	q := &d.heldQ
	q.mu.Lock()
	defer q.mu.Unlock()
	q.inFlight--
	if len(q.waiting) == 0 {
		return
	}
	n := min(len(q.waiting), d.cfg.ClaimGroup, max(1, d.size.groupLimit()))
	lead := slices.Clone(q.waiting[:n])
	q.waiting = slices.Delete(q.waiting, 0, n)
	q.inFlight++
	lead[0].turn <- heldTurn{lead: lead}
}

// runHeldGroup runs the members' batches as one transaction, tells every
// member but the first its outcome (or to run alone), and returns the
// first's, which it runs alone itself if need be.
func (d *Distributor) runHeldGroup(gp GroupProcessor, members []*queuedBatch) heldResult {
	self := members[0].h
	if len(members) == 1 {
		items, caughtUp, released, err := d.batch(self)
		return heldResult{items, caughtUp, released, err}
	}
	hs := make([]*held, len(members))
	for i, m := range members {
		hs[i] = m.h
	}
	res, alone, err := d.heldGroup(gp, hs)
	if err != nil {
		d.log.Debug("batches of a group of held partitions rolled back; each runs alone",
			"partitions", len(hs), "error", err)
	}
	var own heldResult
	for i, m := range members {
		switch {
		case i == 0:
			own = res[0]
		case alone[i]:
			m.turn <- heldTurn{alone: true}
		default:
			m.turn <- heldTurn{res: res[i]}
		}
	}
	if alone[0] {
		items, caughtUp, released, err := d.batch(self)
		return heldResult{items, caughtUp, released, err}
	}
	return own
}

// heldGroup runs the batches of hs as one fenced transaction (txn.go).
// It returns each member's outcome, or that it is to run alone; err is the
// group's failure, if any (every member it concerns is then to run alone).
func (d *Distributor) heldGroup(gp GroupProcessor, hs []*held) (res []heldResult, alone []bool, err error) {
	t := d.heldTxn(gp, hs)
	err = d.runTxn(t)
	res, alone = make([]heldResult, len(hs)), make([]bool, len(hs))
	in := 0
	for i, m := range t.members {
		switch {
		case m.state == memberAlone:
			alone[i] = true
		case m.state == memberOut || err == nil:
			res[i] = d.heldDone(t, m)
		default: // in the transaction that failed, or not fenced before it did
			alone[i] = true
			if m.state == memberIn {
				in++
			}
		}
	}
	if err != nil && t.tried > 0 && dberr.TooLong(err) {
		// Groups take fewer items from now on; each member goes on
		// alone, which halves its own batch if that is too long too.
		limit := d.size.groupTooLong(t.tried, t.elapsed)
		d.log.Info("batches of a group of held partitions too long for one transaction; each runs alone",
			"partitions", in, "items", t.tried, "group_limit", limit, "error", err)
	}
	return res, alone, err
}
