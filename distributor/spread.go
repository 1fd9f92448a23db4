package distributor

import (
	"context"
	"time"

	"github.com/batonhq/baton/internal/decide"
	"github.com/batonhq/baton/internal/notify"
	"github.com/batonhq/baton/internal/taskstore"
)

// takeoverWait remembers when this worker first saw each dead worker's
// partition that it left to the other live workers (beyond its share), so
// that it takes it itself once it has waited Config.SpreadTakeovers. Only
// the claim loop uses it.
type takeoverWait struct {
	seen map[string]decide.StaleSighting[time.Time]
}

// beyondShare returns the stale candidates among cands that this worker
// takes whatever its share (up to MaxPartitions): those it has seen
// waiting at least wait, or all of them when wait is negative; and those
// it sees for the first time (at now, when their wait starts). It forgets
// the rows no longer among cands (claimed, or no longer stale).
func (w *takeoverWait) beyondShare(cands []taskstore.Candidate, now time.Time, wait time.Duration) (beyond, first map[string]bool) {
	var keys []string
	var versions []int64
	for _, c := range cands {
		if c.Owned {
			keys, versions = append(keys, c.Key), append(versions, c.Version)
		}
	}
	w.seen, beyond, first = decide.SightStale(w.seen, keys, versions, now, now.Sub, wait)
	return beyond, first
}

// leftToOthers wakes the other workers when this round left to them
// a dead worker's partitions it saw for the first time (first, less
// those it won): they take their share of them now rather than at their
// next poll. Rows seen before were announced then, so two workers leaving
// rows to each other do not wake each other without end. A failure only
// costs the others that poll's wait.
func (d *Distributor) leftToOthers(ctx context.Context, first map[string]bool, won map[string]bool) {
	if d.cfg.SpreadTakeovers < 0 {
		return
	}
	for k := range first {
		if won[k] {
			continue
		}
		if err := d.store.Notify(ctx, notify.Stale); err != nil {
			d.log.Debug("could not wake the other workers for a dead worker's partitions", "error", err)
		}
		return
	}
}

// spreadShare recomputes the fair share when a claim round has found a
// dead worker's partitions and spreads takeovers (SpreadTakeovers not
// negative): the share in hand may count the dead worker as live, and
// those partitions as its. The new share counts the live workers, what
// they hold and what is claimable, the dead worker's partitions
// included, so that this worker takes its part of them now and leaves
// the rest to the others. It returns the share's want, room and
// segments as wanted does.
func (d *Distributor) spreadShare(ctx context.Context) (want, room, segments int, err error) {
	load, err := d.store.FairShareLoad(ctx, d.worker.InstanceID, d.cfg.MaxPartitions, d.cfg.StaleAfter)
	if err != nil {
		return 0, 0, 0, err
	}
	d.applyShare(load)
	want, room, _, segments = d.wanted()
	return want, room, segments, nil
}
