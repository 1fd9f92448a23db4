package distributor

import (
	"context"
	"time"

	"github.com/batonhq/baton/internal/decide"
	"github.com/batonhq/baton/internal/taskstore"
)

// takeoverWait remembers when this worker first saw each dead worker's
// partition that it left to the other live workers (beyond its share), so
// that it takes it itself once it has waited Config.SpreadTakeovers. Only
// the claim loop uses it.
type takeoverWait struct {
	seen map[string]seenStale
}

// seenStale is when a stale row, at the version read, was first seen.
type seenStale struct {
	version int64
	at      time.Time
}

// beyondShare returns the stale candidates among cands that this worker
// takes whatever its share (up to MaxPartitions): those it has seen
// waiting at least wait, or all of them when wait is negative. It forgets
// the rows no longer among cands (claimed, or no longer stale), and
// starts the wait of those it sees for the first time at now.
func (w *takeoverWait) beyondShare(cands []taskstore.Candidate, now time.Time, wait time.Duration) map[string]bool {
	seen := make(map[string]seenStale, len(cands))
	out := map[string]bool{}
	for _, c := range cands {
		if !c.Owned {
			continue
		}
		s, ok := w.seen[c.Key]
		if !ok || s.version != c.Version {
			s = seenStale{version: c.Version, at: now}
		}
		seen[c.Key] = s
		if decide.TakeBeyondShare(now.Sub(s.at), wait) {
			out[c.Key] = true
		}
	}
	w.seen = seen
	return out
}

// spreadShare recomputes the fair share when a claim round has found a
// dead worker's partitions and spreads takeovers (SpreadTakeovers not
// negative): the share in hand may count the dead worker as live, and
// those partitions as its. The new share counts the live workers, what
// they hold and what is claimable, the dead worker's partitions
// included, so that this worker takes its part of them now and leaves
// the rest to the others. It returns the share's want and room as
// wanted does.
func (d *Distributor) spreadShare(ctx context.Context, stale int, want, room int) (int, int, error) {
	if stale == 0 || d.cfg.SpreadTakeovers < 0 {
		return want, room, nil
	}
	load, err := d.store.FairShareLoad(ctx, d.worker.InstanceID, d.cfg.MaxPartitions, d.cfg.StaleAfter)
	if err != nil {
		return 0, 0, err
	}
	d.applyShare(load)
	want, room, _ = d.wanted()
	return want, room, nil
}
