package distributor

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/batonhq/baton/partition"
)

// rebalance recomputes the fair share, asks surplus partitions to be handed
// back, and in until-done mode detects that all work is done.
func (d *Distributor) rebalance(ctx context.Context) (*finished, error) {
	load, err := d.store.FairShareLoad(ctx, d.worker.InstanceID, d.cfg.MaxPartitions, d.cfg.StaleAfter)
	if err != nil {
		return nil, err
	}
	if d.cfg.UntilDone && d.heldCount() == 0 && load.Busy == 0 {
		// The load reads claimable rows from the store's floor; whether
		// anything is pending is answered exactly before stopping.
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
			return &finished{fmt.Errorf("%w: %d partition(s) quarantined; see status, then retry", ErrIncomplete, quarantined)}, nil
		}
		d.log.Info("all work done", "event", "done")
		return &finished{}, nil
	}
	d.applyShare(load)
	return nil, nil
}

// applyShare sets the fair share from load and asks surplus partitions to
// be handed back.
func (d *Distributor) applyShare(load partition.Load) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var keep []*held
	idle := 0
	for _, h := range d.held {
		if !h.handBack.Load() {
			keep = append(keep, h)
			if h.idle.Load() {
				idle++
			}
		}
	}
	p := planShare(load, len(keep), idle, d.cfg.Mode, d.cfg.MaxPartitions)
	d.log.Debug("fair share computed", "share", p.share, "busy", load.Busy, "live_workers", load.LiveWorkers,
		"unclaimed", load.Unclaimed, "wanted_by_others", load.Wanted)
	d.share = p.share
	d.shareIdle = load.Busy == 0
	// Work beyond the share: only once nobody else has wanted the
	// unclaimed work for a lease's length (two reads at least StaleAfter
	// apart): a live worker below its share says so by a heartbeat within
	// that time, however starved its machine, and takes the work first.
	now := d.cfg.Clock.Now()
	switch {
	case !p.overflow:
		d.overflowSince = time.Time{}
	case d.overflowSince.IsZero():
		d.overflowSince = now
	}
	d.overflow = p.overflow && now.Sub(d.overflowSince) >= d.cfg.StaleAfter
	handBack := func(h *held) {
		h.handBack.Store(true)
		select {
		case h.nudge <- struct{}{}:
		default:
		}
	}
	if p.handBack > 0 {
		// Newest claims first: they have the least progress to lose.
		slices.SortFunc(keep, func(a, b *held) int { return b.claimedAt.Compare(a.claimedAt) })
		for _, h := range keep[:p.handBack] {
			handBack(h)
		}
		d.log.Info("above fair share, handing back partitions", "held", len(d.held), "handing_back", p.handBack,
			"share", p.share, "live_workers", load.LiveWorkers)
	}
	if p.handBackIdle > 0 {
		n := 0
		for _, h := range keep {
			if n < p.handBackIdle && h.idle.Load() {
				handBack(h)
				n++
			}
		}
		d.log.Info("leader at capacity with work waiting: handing back idle partitions", "handing_back", n, "unclaimed", load.Unclaimed)
	}
}

// sharePlan is a fair-share decision: the share, and how many held
// partitions to hand back.
type sharePlan struct {
	share int // partitions this worker may hold: ceil(busy / live), at most MaxPartitions
	// claim is how many more unowned partitions the share allows.
	claim int
	// handBack is how many of the newest claims to hand back because the
	// worker holds more than its share and someone else can take them.
	handBack int
	// handBackIdle is how many caught-up partitions a leader at capacity
	// hands back so that waiting work nobody has room for can be claimed.
	handBackIdle int
	// overflow: work is unclaimed and no other live worker wants more, so
	// it may be claimed beyond the share, up to MaxPartitions (once the
	// condition has held for a while: applyShare).
	overflow bool
}

// planShare decides the fair share from the cluster load and the worker's
// held partitions (not counting those already being handed back; idle of
// them caught up in leader mode). It is a pure function of its inputs.
func planShare(load partition.Load, held, idle int, mode Mode, maxPartitions int) sharePlan {
	p := sharePlan{share: maxPartitions}
	if load.LiveWorkers > 1 {
		p.share = min(p.share, max(1, (load.Busy+load.LiveWorkers-1)/load.LiveWorkers))
	}
	p.claim = max(0, p.share-held)
	// Hand back only what another worker will take: there is nothing
	// unclaimed left for it, and it said (its heartbeat's Wanted) that it
	// wants more. A live worker that cannot take more (at its own
	// MaxPartitions, or not claiming at all) wants nothing, so nothing is
	// handed back to sit unclaimed. Otherwise keep them and avoid needless
	// handoffs.
	if surplus := held - p.share; surplus > 0 && load.Unclaimed == 0 && load.Wanted > 0 {
		p.handBack = min(surplus, load.Wanted)
		return p
	}
	// Work waiting that no other worker wants: it must not wait for a
	// worker that will never take it.
	p.overflow = load.Unclaimed > 0 && load.Wanted == 0 && held < maxPartitions
	// A leader at capacity must not sit on caught-up partitions while
	// claimable work waits that nobody has room for.
	if mode == ModeLeader && load.Unclaimed > 0 && held >= p.share {
		p.handBackIdle = min(idle, load.Unclaimed)
	}
	return p
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
