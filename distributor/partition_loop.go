package distributor

import (
	"context"
	"errors"
	"time"

	"github.com/batonhq/baton/internal/dberr"
	"github.com/batonhq/baton/internal/decide"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
)

func (d *Distributor) start(c taskstore.Claimed, sent time.Time) {
	d.startHeld(c, sent, false, nil, false)
}

// startHeld tracks a won claim and runs it. started says its first batch
// has committed already (with the claim); failWith, if set, is a failure of
// that first batch to record before anything else; reserved says the room
// it takes was reserved by claimFreshAll, which this hands over to the held
// partition in the same step.
func (d *Distributor) startHeld(c taskstore.Claimed, sent time.Time, started bool, failWith error, reserved bool) {
	h := &held{takeover: c.Takeover, claimedAt: sent, prevBeat: c.PrevHeartbeat, nudge: make(chan struct{}, 1),
		started: started, failWith: failWith}
	h.lease = d.hb.Track(d.base, c.Lease, sent, c.Takeover)
	h.pending.Store(max(0, c.Available-c.Position))
	d.mu.Lock()
	d.held[c.Key] = h
	// Its backlog was counted as claimable in the last load: it is this
	// worker's now.
	d.othersBacklog = max(0, d.othersBacklog-h.pending.Load())
	if reserved {
		delete(d.claiming, c.Key)
	}
	d.mu.Unlock()
	d.wg.Add(1)
	go d.runPartition(h)
}

// runPartition processes one held partition until it is caught up (lock
// mode), handed back, lost or the worker stops.
func (d *Distributor) runPartition(h *held) {
	defer d.wg.Done()
	defer d.dropHeld(h)
	if h.takeover && !d.confirm(h) {
		return
	}
	if h.failWith != nil {
		// The first batch failed in the claim's own transaction, which
		// rolled back; the claim was then made alone: record the failure.
		d.fail(h, h.failWith)
		return
	}
	transient := 0
	for !d.stopsBeforeBatch(h) {
		_, caughtUp, released, err := d.heldBatch(h)
		if err != nil {
			if d.batchFailed(h, err, &transient) {
				continue
			}
			return
		}
		transient = 0
		// A batch that reached the available count goes straight on: no
		// empty fenced transaction just to learn there is nothing left.
		// Work arriving meanwhile is not missed: a release notifies when
		// work is pending, and a leader is woken by its next heartbeat.
		switch l := h.lease; {
		case released:
			d.hb.Release(l)
			d.emit(Event{Kind: EventReleased, Key: l.Key, Version: l.Version, Reason: "caught_up"})
			d.log.Info("released partition", "event", "released", d.cfg.KeyAttr, l.Key, "version", l.Version,
				"reason", "caught_up", "with_batch", true)
			return
		case !caughtUp:
			continue
		case d.releasesCaughtUp(partition.PartitionOf(l.Key) != l.Key):
			d.release(h, "caught_up")
			return
		}
		d.waitForWork(h) // leader: keep the partition
	}
}

// dropHeld forgets h once its loop has ended, and wakes the claim loop.
func (d *Distributor) dropHeld(h *held) {
	d.mu.Lock()
	if cur, ok := d.held[h.lease.Key]; ok && cur == h {
		delete(d.held, h.lease.Key)
	}
	d.mu.Unlock()
	d.wake()
}

// confirm waits for a takeover's claim to be confirmed, and reports
// whether it was (otherwise the lease was lost, or the worker is leaving,
// and h is done).
func (d *Distributor) confirm(h *held) bool {
	l := h.lease
	lctx := l.Context()
	_, span := tracer.Start(d.base, "baton.confirm", d.leaseAttrs(l.Lease))
	select {
	case <-l.Confirmed():
		span.End()
		d.emit(Event{Kind: EventConfirmed, Key: l.Key, Version: l.Version})
		d.log.Info("claim confirmed", "event", "confirmed", d.cfg.KeyAttr, l.Key, "version", l.Version,
			"waited_ms", d.cfg.Clock.Since(h.claimedAt).Milliseconds())
		return true
	case <-lctx.Done():
		endSpan(span, context.Cause(lctx))
		d.lost(h, context.Cause(lctx))
	case <-d.leaving:
		span.End()
		d.release(h, "shutdown")
	}
	return false
}

// stopsBeforeBatch ends h before its next batch, and reports so, when its
// lease is lost, the worker is leaving, h is handed back or it is paused.
func (d *Distributor) stopsBeforeBatch(h *held) bool {
	l := h.lease
	switch {
	case l.Context().Err() != nil:
		d.lost(h, context.Cause(l.Context()))
	case d.isLeaving():
		d.release(h, "shutdown")
	case h.handBack.Load():
		d.release(h, "rebalance")
	case l.Paused():
		// Paused by an operator: the last batch committed whole;
		// nothing more until it is resumed.
		d.release(h, "paused")
	default:
		return false
	}
	return true
}

// batchFailed meets a failed batch of h: it reports whether h tries again
// (a batch too long, with fewer items; a transient error, while the lease
// holds) or ends (fenced, lost, abandoned, or failed: recorded, backing
// off). transient counts the transient failures in a row.
func (d *Distributor) batchFailed(h *held, err error, transient *int) (again bool) {
	l := h.lease
	lctx := l.Context()
	switch {
	case errors.Is(err, partition.ErrFenced):
		d.hb.Release(l)
		d.record(partition.EventFenced, l.Lease, err)
		d.emit(Event{Kind: EventFenced, Key: l.Key, Version: l.Version, Err: err})
		d.log.Warn("commit rejected by the fence: partition belongs to a newer claim", "event", "fenced",
			d.cfg.KeyAttr, l.Key, "version", l.Version)
	case lctx.Err() != nil:
		d.lost(h, context.Cause(lctx))
	case errors.Is(err, errAbandoned):
		d.release(h, "shutdown")
	case h.tried > 1 && dberr.TooLong(err):
		// Too long for the statement timeout: rolled back. Again at
		// once with half the items (sizing.go); not a failure.
		limit, _ := d.size.batchTooLong(h.tried, h.took)
		d.log.Info("batch too long for one transaction; retrying with fewer items", d.cfg.KeyAttr, l.Key,
			"version", l.Version, "items", h.tried, "batch_limit", limit, "error", err)
		return true
	case dberr.Transient(err) && decide.RetryTransient(*transient, d.cfg.MaxAttempts):
		*transient++
		d.statementFailed(err)
		d.log.Warn("batch failed with a transient error; retrying while the lease holds",
			d.cfg.KeyAttr, l.Key, "version", l.Version, "error", err, "attempt", *transient)
		select {
		case <-lctx.Done():
		case <-d.leaving:
		case <-d.cfg.Clock.After(d.cfg.Heartbeat):
		}
		return true
	default:
		d.fail(h, err)
	}
	return false
}

// waitForWork waits, in leader mode, for new work on h's caught-up
// partition (or a nudge, the lease's end or the worker's leaving).
func (d *Distributor) waitForWork(h *held) {
	h.idle.Store(true)
	select {
	case <-h.lease.Work():
	case <-h.nudge:
	case <-h.lease.Context().Done():
	case <-d.leaving:
	}
	h.idle.Store(false)
}
