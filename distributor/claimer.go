package distributor

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"time"

	"github.com/batonhq/baton/internal/dberr"
	"github.com/batonhq/baton/internal/decide"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
)

// claimLoop claims partitions up to the fair share until stopped.
//
// A stop does not cancel a round in flight: a claim statement cancelled on
// the client may still apply on the server, and the worker would hold rows
// it does not know about until their leases expired. Each round is bounded
// by its own timeout instead, and the loop checks for a stop between rounds.
func (d *Distributor) claimLoop() {
	defer close(d.loopDone)
	poll := d.cfg.Clock.NewTicker(d.cfg.PollInterval)
	defer poll.Stop()
	var lastRebalance, lastPrune time.Time
	failures := 0
	// claimed: the last round claimed something. With UntilDone a worker
	// holding nothing reads the cluster load every round, to learn that
	// all work is done; right after a round that claimed, there was work,
	// so the read is skipped, and a round that then finds nothing comes
	// straight back to make it.
	claimed := false
	for !d.isStopping() {
		ctx, cancel := context.WithTimeout(d.base, d.cfg.StaleAfter/2)
		now := d.cfg.Clock.Now()
		var roundErr error
		// A round that reads the load anyway (its interval is up, or an
		// until-done worker holding nothing looks for the end) recomputes
		// the share with it.
		due := lastRebalance.IsZero() || now.Sub(lastRebalance) >= d.rebalanceInterval() ||
			d.cfg.UntilDone && d.heldCount() == 0 && !claimed
		recompute, owed, deferred := d.notifiedRecompute(now, lastRebalance, due)
		if due || recompute {
			finished, err := d.rebalance(ctx)
			if err != nil {
				roundErr = fmt.Errorf("reading cluster load: %w", err)
				if recompute {
					d.workChanged.Store(true) // still owed: the retry recomputes
					owed = true
				}
			} else {
				lastRebalance = now
			}
			if finished != nil {
				cancel()
				go d.finish(finished.err)
				return
			}
		}
		if now.Sub(lastPrune) >= pruneInterval {
			d.pruneEvents(ctx)
			lastPrune = now
		}
		skipped := claimed
		claimed = false
		if !owed {
			// A round without room (woken while claims are in flight)
			// learns nothing about the work left.
			full := !d.hasRoom()
			n, err := d.claim(ctx)
			if err != nil {
				roundErr = errors.Join(roundErr, fmt.Errorf("claiming: %w", err))
			}
			claimed = n > 0 || full && skipped
		}
		cancel()
		var retry <-chan time.Time
		if roundErr != nil {
			retry = d.roundFailed(roundErr, &failures)
		} else {
			failures = 0
			if skipped && !claimed && d.cfg.UntilDone && d.heldCount() == 0 {
				continue // the load read skipped after the last claims
			}
		}
		select {
		case <-d.stopping:
			return
		case <-poll.Chan():
		case <-d.wakeClaim:
		case <-retry:
		case <-deferred:
		}
	}
}

// notifiedRecompute decides what a round does about notifications since
// the share was last computed (at lastRebalance; due: the round reads the
// load anyway). A notification that work was loaded or retried means the
// share may be stale: a worker with room recomputes it now rather than at
// the next rebalance, at most once a heartbeat (loads can be frequent). A
// worker that left changes the live count: that recompute is not
// rate-limited (departures are rare), so the partitions it releases right
// after are claimed at once. A notification inside that heartbeat is
// kept, not dropped (owed): the loop comes back for it when the heartbeat
// has passed (deferred). While a recompute is owed, the share in hand is
// known to be stale (computed, say, when this worker was alone or there
// was no work), so the round claims nothing: claiming up to a stale share
// would take other workers' partitions, and only a rebalance, possibly an
// hour away, would give them back. A round due to read the load makes a
// notification's recompute rather than owing it. Deferring it instead
// would defer it for ever when every round reads the load, since each read
// resets the once-a-heartbeat limit (the worker would claim nothing while
// work waits).
func (d *Distributor) notifiedRecompute(now, lastRebalance time.Time, due bool) (recompute, owed bool, deferred <-chan time.Time) {
	room := d.hasRoom()
	switch {
	case room && d.workerLeft.Swap(false):
		d.workChanged.Store(false)
		return true, false, nil
	case !room || !d.workChanged.Load():
		return false, false, nil
	}
	if wait := d.cfg.Heartbeat - now.Sub(lastRebalance); wait > 0 && !lastRebalance.IsZero() && !due {
		return false, true, d.cfg.Clock.After(wait)
	}
	d.workChanged.Store(false)
	return true, false, nil
}

// roundFailed reports a failed claim round and returns when to retry it:
// after a backoff rather than at the next poll, since the work it was
// looking for is still waiting. failures counts the failed rounds in a row.
func (d *Distributor) roundFailed(err error, failures *int) <-chan time.Time {
	delay := decide.ClaimRetryDelay(d.cfg.Backoff, d.cfg.MaxBackoff, d.cfg.PollInterval, *failures)
	*failures++
	d.emit(Event{Kind: EventClaimRoundFailed, Err: err, Attempts: *failures})
	d.log.Warn("claim round failed", "event", string(EventClaimRoundFailed), "error", err,
		"failures", *failures, "retry_in", delay)
	return d.cfg.Clock.After(delay)
}

// rebalanceInterval is how long the share in hand may serve: a worker
// with room below MaxPartitions reads it again at least every StaleAfter/2,
// whatever RebalanceInterval is, so that work nobody else wants (a
// partition handed back, or out of its back-off, with every other worker at
// its share) is found and taken beyond the share once that has lasted a
// lease's length (applyShare). With the defaults (5s and 10s/2) this
// changes nothing.
func (d *Distributor) rebalanceInterval() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.overflowSince.IsZero() || d.occupied() < d.cfg.MaxPartitions {
		return min(d.cfg.RebalanceInterval, d.cfg.StaleAfter/2)
	}
	return d.cfg.RebalanceInterval
}

type finished struct{ err error }

// claim tries to fill the worker up to its share, and takes partitions of
// dead workers beyond it. Candidates are read from the head of the
// claimable index, shuffled so that workers polling at the same moment
// spread over different rows, and claimed in one compare-and-set
// statement.
//
// A dead worker's partitions (still owned, lease expired) are spread over
// the live workers: a round that finds some recomputes the share first
// (the share in hand may still count the dead worker, and its partitions,
// as live), claims them within that share, ahead of unowned ones, and
// leaves the rest to the others, who find them at their next poll. One it
// has seen waiting for Config.SpreadTakeovers it claims whatever the
// share, up to MaxPartitions, so none waits for a live worker that does
// not take it (at its own MaxPartitions, say) beyond the takeover bound.
// So no survivor takes all of them only to hand some back after
// confirming them.
func (d *Distributor) claim(ctx context.Context) (started int, err error) {
	cands, want, room, segmentsOnly, err := d.claimCandidates(ctx)
	if err != nil || len(cands) == 0 {
		return 0, err
	}
	// A candidate this worker is claiming already (its claim commits with
	// its first batch) still reads as claimable: leave it alone.
	d.mu.Lock()
	cands = slices.DeleteFunc(cands, func(c taskstore.Candidate) bool { _, ok := d.claiming[c.Key]; return ok })
	cands = d.skipLost(cands)
	d.mu.Unlock()
	// Shuffled so that workers polling together spread out, the stale
	// ones still ahead of the unowned ones (pickClaims takes them first).
	mrand.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	decide.StaleFirst(cands, candOwned)
	if cands, err = d.withinBacklogShare(ctx, cands); err != nil {
		return 0, err
	}
	// A dead worker's partitions are taken within the share, like unowned
	// ones, and beyond it (up to room) only those the other live workers
	// have left for SpreadTakeovers (spread.go).
	beyond, first := d.takeovers.beyondShare(cands, d.cfg.Clock.Now(), d.cfg.SpreadTakeovers)
	if segmentsOnly {
		// want is the count share's, for unowned segments only: what
		// else the round read it takes as a worker at its share does
		// (a dead worker's partitions beyond the share).
		cands = slices.DeleteFunc(cands, func(c taskstore.Candidate) bool { return notSegment(c) && !beyond[c.Key] })
	}
	taken := map[string]bool{}
	defer func() { d.leftToOthers(ctx, first, taken) }()
	anyShare := func(c taskstore.Candidate) bool { return c.Owned && beyond[c.Key] }
	if left := countStale(cands) - len(beyond); left > 0 {
		d.log.Debug("spreading a dead worker's partitions", "stale", countStale(cands), "beyond_share", len(beyond),
			"left_to_others_unless_in_share", left, "want", want, "room", room)
	}
	// Riders only while room, not the share, bounds the worker: there is
	// more work than the workers have room for.
	ride := !segmentsOnly && want >= room
	for round := 0; round < 2 && room > 0 && len(cands) > 0; round++ {
		var try, fresh, riders, spares []taskstore.Candidate
		try, cands = decide.PickClaims(cands, anyShare, want, room)
		if len(try) == 0 {
			break
		}
		// Unowned partitions are claimed each in the transaction of its
		// first batch, several in one when the processor can group them
		// (claimFreshAll), with riders (riders.go) filling the groups; a
		// lost one wakes the loop for another round. Takeovers are
		// claimed together here, to be confirmed.
		try, fresh, cands = splitFresh(try, cands)
		if ride {
			riders, cands = d.pickRiders(fresh, cands)
		}
		spares, cands = pickSpares(len(fresh)+len(riders), cands)
		want, room = want-len(fresh), room-len(fresh)
		d.claimFreshAll(fresh, riders, spares)
		started += len(fresh)
		if len(try) == 0 {
			break
		}
		won, err := d.claimTakeovers(ctx, try)
		if err != nil {
			return started, err
		}
		started += len(won)
		for _, c := range won {
			taken[c.Key] = true
			if !c.Takeover || !beyond[c.Key] {
				want--
			}
			room--
		}
	}
	return started, nil
}

// claimCandidates reads the candidates of a claim round and how many this
// worker wants and has room for; none when it has no room or finds none.
// segmentsOnly says that it wants no partition but unowned segments (and
// a dead worker's partitions beyond its share): it holds its part of the
// backlog, and want is what the count share would allow.
func (d *Distributor) claimCandidates(ctx context.Context) (cands []taskstore.Candidate, want, room int, segmentsOnly bool, err error) {
	want, room, idle, segments := d.wanted()
	if room <= 0 {
		return nil, 0, 0, false, nil
	}
	// A dead worker's partitions first: their work has started and was
	// interrupted, and their owner's lease has run out already. Unowned
	// rows sort first in the claimable index (-infinity), so with many of
	// them waiting the stale ones would never reach a window read from its
	// head: they are read from just past the unowned rows.
	cands, err = d.store.StaleCandidates(ctx, decide.StaleReadLimit(room))
	if err != nil {
		return nil, 0, 0, false, err
	}
	if len(cands) > 0 && d.cfg.SpreadTakeovers >= 0 {
		// The share decides how many of them this worker takes now.
		if want, room, segments, err = d.spreadShare(ctx); err != nil || room <= 0 {
			return nil, 0, 0, false, err
		}
		idle = false
	}
	if want <= 0 && room > 0 {
		// Holding its part of the backlog as the last load counted it,
		// it still looks for unowned segments, of which its part is
		// reckoned afresh (withinBacklogShare): the load counts the
		// claimable rows only up to a cap in claimable order, and a split
		// partition's segments queue behind the rows claimable before
		// them, so the load read right after a split does not see them.
		want, segmentsOnly = segments, true
	}
	if decide.ReadHead(want, len(cands), room) {
		if cands, err = d.headCandidates(ctx, cands, want); err != nil {
			return nil, 0, 0, false, err
		}
	}
	if len(cands) == 0 {
		return nil, 0, 0, false, nil
	}
	if idle && want > 0 {
		// The share was computed when there was no work (1 of nothing, or
		// all of it for a worker that was alone); work has arrived since,
		// perhaps seen by this poll before its notification: recompute
		// before claiming. This costs one load read per idle-to-busy turn.
		load, err := d.store.FairShareLoad(ctx, d.worker.InstanceID, d.cfg.MaxPartitions, d.cfg.StaleAfter)
		if err != nil {
			return nil, 0, 0, false, err
		}
		d.applyShare(load)
		if want, room, _, _ = d.wanted(); room <= 0 {
			return nil, 0, 0, false, nil
		}
	}
	return cands, want, room, segmentsOnly, nil
}

// headCandidates adds the head of the claimable index to the stale
// candidates read. Rows being claimed with their first batch still read as
// claimable at the head of the index: it reads past those this worker
// knows of (its own, and those it lost to others), which it skips, and
// widens the window by as many again as it could hold, so that picks
// spread beyond rows another worker is claiming (each such pick costs a
// fence that finds it taken).
func (d *Distributor) headCandidates(ctx context.Context, stale []taskstore.Candidate, want int) ([]taskstore.Candidate, error) {
	d.mu.Lock()
	inFlight := len(d.claiming) + len(d.lostClaims)
	d.mu.Unlock()
	head, err := d.store.Candidates(ctx, decide.HeadReadLimit(want, inFlight, d.cfg.MaxPartitions))
	if err != nil {
		return nil, err
	}
	// The head may repeat stale rows already read.
	seen := make(map[string]bool, len(stale))
	for _, c := range stale {
		seen[c.Key] = true
	}
	cands := stale
	for _, c := range head {
		if !seen[c.Key] {
			cands = append(cands, c)
		}
	}
	return cands, nil
}

// splitFresh takes the unowned candidates (fresh) out of try, leaving the
// takeovers.
func splitFresh(try, cands []taskstore.Candidate) (takeovers, fresh, rest []taskstore.Candidate) {
	takeovers = slices.DeleteFunc(try, func(c taskstore.Candidate) bool {
		if c.Owned {
			return false
		}
		fresh = append(fresh, c)
		return true
	})
	return takeovers, fresh, cands
}

// pickSpares takes spares out of cands when the round claims two or more
// partitions with their first batches (claims, riders included): more
// unowned candidates than it claims, which a group fences in place of
// members it loses to other workers.
func pickSpares(claims int, cands []taskstore.Candidate) (spares, rest []taskstore.Candidate) {
	if claims < 2 {
		return nil, cands
	}
	rest = slices.DeleteFunc(cands, func(c taskstore.Candidate) bool {
		if c.Owned || len(spares) > claims/2 {
			return false
		}
		spares = append(spares, c)
		return true
	})
	return spares, rest
}

// claimTakeovers claims try (a dead worker's partitions) together, to be
// confirmed, and starts those won.
func (d *Distributor) claimTakeovers(ctx context.Context, try []taskstore.Candidate) ([]taskstore.Claimed, error) {
	sent := d.cfg.Clock.Now()
	won, err := d.claimTraced(ctx, try)
	if err != nil {
		if !dberr.UnknownOutcome(err) {
			return nil, err
		}
		// The claim may have applied with its reply lost: re-read, and
		// adopt whatever is ours so it is processed or handed back
		// rather than left owned until its lease expires.
		adopted, rerr := d.resolveClaims(try)
		if rerr != nil {
			return nil, fmt.Errorf("%w (outcome re-read: %v)", err, rerr)
		}
		d.log.Warn("claim outcome was unknown; re-read it", "error", err, "adopted", len(adopted))
		won = adopted
	}
	for _, c := range won {
		d.reportClaim(c)
		d.start(c, sent)
	}
	if lost := len(try) - len(won); lost > 0 {
		d.emit(Event{Kind: EventClaimLost, Items: lost})
	}
	return won, nil
}

// withinBacklogShare leaves out the segment candidates beyond this
// worker's part of the segments in sight (decide.WithinBacklogShare): the
// pending items of the segments of their partitions that it holds or is
// claiming, that it read, and that the other workers hold, among the live
// workers. The count share alone let the first worker to see a split
// partition's segments take as many as it had room for (a 90 % contract's
// 9 segments went 6 and 3, or 5 and 2, run after run), and the other
// finish early and wait while it priced them; shared by items, a worker
// takes the rest as its own run low. What the others hold is read afresh
// (their segments' positions as last committed): reckoned without it, a
// worker holding 4 of 10 segments and seeing the last 2 took none (its
// part of the 6 in its sight reached), and they waited, unclaimed, until
// its own ran low, to be priced by one worker at the end. Other
// partitions (and a dead worker's) are left to the count share; nothing
// is left out once work may be taken beyond the share (nobody else wants
// it).
func (d *Distributor) withinBacklogShare(ctx context.Context, cands []taskstore.Candidate) ([]taskstore.Candidate, error) {
	var parents []string
	for _, c := range cands {
		if p, _, seg := partition.ParseSegmentKey(c.Key); seg && !c.Owned && !slices.Contains(parents, p) {
			parents = append(parents, p)
		}
	}
	d.mu.Lock()
	live, overflow := d.liveWorkers, d.overflow
	self := int64(0)
	for k, h := range d.held {
		if p, _, seg := partition.ParseSegmentKey(k); seg && !h.handBack.Load() && slices.Contains(parents, p) {
			self += h.pending.Load()
		}
	}
	for k, n := range d.claiming {
		if p, _, seg := partition.ParseSegmentKey(k); seg && slices.Contains(parents, p) {
			self += n
		}
	}
	d.mu.Unlock()
	if overflow || len(parents) == 0 || live < 2 {
		return cands, nil
	}
	others, err := d.store.SegmentsHeldByOthers(ctx, d.worker.InstanceID, parents)
	if err != nil {
		return nil, err
	}
	return decide.WithinBacklogShare(cands, notSegment, candBacklog, self, others, live), nil
}

// notSegment reports whether a candidate is anything but an unowned
// segment: withinBacklogShare leaves those to the count share.
func notSegment(c taskstore.Candidate) bool {
	_, _, seg := partition.ParseSegmentKey(c.Key)
	return c.Owned || !seg
}

// candBacklog is a candidate's pending items when it was read.
func candBacklog(c taskstore.Candidate) int64 { return c.Backlog }

// candOwned reports whether a candidate is a dead worker's partition.
func candOwned(c taskstore.Candidate) bool { return c.Owned }

// countStale counts the dead workers' partitions among cands.
func countStale(cands []taskstore.Candidate) int {
	n := 0
	for _, c := range cands {
		if c.Owned {
			n++
		}
	}
	return n
}

// wanted is how many more partitions the share allows (want) and
// MaxPartitions allows (room), and whether the share was computed when
// there was no work at all. Both are zero while partitions are being handed
// back: claiming then would churn. segments is want before the cut for
// the backlog this worker holds (decide.BacklogShare): the most unowned
// segments it looks for once that backlog is its part.
func (d *Distributor) wanted() (want, room int, idle bool, segments int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	handingBack := false
	held, self := 0, int64(0)
	for _, h := range d.held {
		if h.handBack.Load() {
			handingBack = true
			continue
		}
		held++
		self += h.pending.Load()
	}
	share := decide.BacklogShare(d.share, held, self, d.othersBacklog, d.liveWorkers)
	want, room = decide.Wanted(share, d.cfg.MaxPartitions, d.occupied(), d.overflow, handingBack)
	segments, _ = decide.Wanted(d.share, d.cfg.MaxPartitions, d.occupied(), d.overflow, handingBack)
	return want, room, d.shareIdle, segments
}

// wantedMore is how many more partitions the share allows this worker,
// published by its heartbeats (taskstore.Worker.Wanted) so that the others
// hand surplus back only to a worker that will take it.
func (d *Distributor) wantedMore() int {
	want, _, _, _ := d.wanted()
	return max(0, want)
}

// resolveClaims finds which of the candidates a claim whose outcome is
// unknown actually won: those now at the next version under this owner.
func (d *Distributor) resolveClaims(cands []taskstore.Candidate) ([]taskstore.Claimed, error) {
	ctx, cancel := context.WithTimeout(d.base, d.cfg.StaleAfter/2)
	defer cancel()
	next := make([]partition.Lease, len(cands))
	owned := make(map[string]bool, len(cands))
	for i, c := range cands {
		next[i] = partition.Lease{Key: c.Key, Version: c.Version + 1}
		owned[c.Key] = c.Owned
	}
	held, err := d.store.Inspect(ctx, d.worker.InstanceID, next)
	if err != nil {
		return nil, err
	}
	out := make([]taskstore.Claimed, len(held))
	for i, h := range held {
		out[i] = taskstore.Claimed{Lease: h.Lease, Takeover: owned[h.Key]}
	}
	return out, nil
}
