package distributor

import (
	"context"
	"time"

	"github.com/batonhq/baton/internal/decide"
	"github.com/batonhq/baton/internal/taskstore"
)

// rebalance recomputes the fair share, asks surplus partitions to be handed
// back, and in until-done mode detects that all work is done.
func (d *Distributor) rebalance(ctx context.Context) (*finished, error) {
	load, err := d.store.FairShareLoad(ctx, d.worker.InstanceID, d.cfg.MaxPartitions, d.cfg.StaleAfter)
	if err != nil {
		return nil, err
	}
	if d.cfg.UntilDone && d.heldCount() == 0 && (load.Busy == 0 || load.Unclaimed == 0) {
		// The load reads claimable rows from the store's floor; whether
		// anything is pending is answered exactly before stopping. Busy
		// alone is not enough: it counts the partitions that the workers'
		// last heartbeats said they held, and a partition released with
		// its last batch (in the batch's transaction) is counted until
		// its worker's next heartbeat, so a run whose last partitions
		// end that way would wait that long, and then for a poll, to
		// notice. With nothing claimable and nothing held, the exact
		// answer decides: pending work held by others keeps the worker
		// waiting as before, and the last worker to finish stops at once
		// (its stop notifies the others, which then do too).
		pending, err := d.store.PendingWork(ctx)
		if err != nil {
			return nil, err
		}
		if pending {
			d.applyShare(load)
			return nil, nil
		}
		quarantined, err := d.store.QuarantinedCount(ctx)
		if err != nil {
			return nil, err
		}
		if quarantined > 0 {
			return &finished{&IncompleteError{Quarantined: quarantined}}, nil
		}
		d.log.Info("all work done", "event", "done")
		return &finished{}, nil
	}
	d.applyShare(load)
	return nil, nil
}

// applyShare sets the fair share from load and asks surplus partitions to
// be handed back.
func (d *Distributor) applyShare(load taskstore.Load) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var keep []*held
	idle := 0
	self := int64(0)
	for _, h := range d.held {
		if !h.handBack.Load() {
			keep = append(keep, h)
			self += h.pending.Load()
			if h.idle.Load() {
				idle++
			}
		}
	}
	// Its own backlog as it knows it, fresher than its last heartbeat's.
	load.Backlog += self - load.SelfBacklog
	load.SelfBacklog = self
	d.othersBacklog, d.liveWorkers = max(0, load.Backlog-self), load.LiveWorkers
	p := decide.PlanShare(load, len(keep), idle, d.cfg.Mode == ModeLeader, d.cfg.MaxPartitions)
	d.log.Debug("fair share computed", "share", p.Share, "busy", load.Busy, "live_workers", load.LiveWorkers,
		"unclaimed", load.Unclaimed, "wanted_by_others", load.Wanted, "backlog", load.Backlog, "own_backlog", self)
	d.share = p.Share
	d.shareIdle = load.Busy == 0
	// Work beyond the share: only once nobody else has wanted the
	// unclaimed work for a lease's length (two reads at least StaleAfter
	// apart).
	now := d.cfg.Clock.Now()
	switch {
	case !p.Overflow:
		d.overflowSince = time.Time{}
	case d.overflowSince.IsZero():
		d.overflowSince = now
	}
	d.overflow = decide.OverflowAllowed(p.Overflow, now.Sub(d.overflowSince), d.cfg.StaleAfter)
	handBack := func(h *held) {
		h.handBack.Store(true)
		select {
		case h.nudge <- struct{}{}:
		default:
		}
	}
	if p.HandBack > 0 {
		decide.Newest(keep, func(h *held) time.Time { return h.claimedAt })
		for _, h := range keep[:p.HandBack] {
			handBack(h)
		}
		d.log.Info("above fair share, handing back partitions", "held", len(d.held), "handing_back", p.HandBack,
			"share", p.Share, "live_workers", load.LiveWorkers)
	}
	if p.HandBackIdle > 0 {
		n := 0
		for _, h := range keep {
			if n < p.HandBackIdle && h.idle.Load() {
				handBack(h)
				n++
			}
		}
		d.log.Info("leader at capacity with work waiting: handing back idle partitions", "handing_back", n, "unclaimed", load.Unclaimed)
	}
}

// hasRoom reports whether the worker holds fewer than MaxPartitions.
func (d *Distributor) hasRoom() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.occupied() < d.cfg.MaxPartitions
}

// occupied is how many partitions count against MaxPartitions: those held
// and those being claimed with their first batch. d.mu must be held.
func (d *Distributor) occupied() int { return len(d.held) + len(d.claiming) }
