package distributor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/dberr"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
	"github.com/uptrace/bun"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Several partitions nobody owns, claimed with their first batches in one
// transaction (Config.ClaimGroup, GroupProcessor): one fence statement for
// them all, the processor's group, one statement that claims them all and
// records their checkpoints, history and releases, one commit. Each member
// goes through what a lone claim with its first batch does (claimbatch.go);
// the group only shares the statements and the WAL flush. A member lost at
// the fence is dropped from the group; any other failure rolls the whole
// group back, and each member is then claimed with its first batch on its
// own, which records a processor error against the member that causes it.

// claimFreshAll claims unowned candidates with their first batches: in
// groups of up to ClaimGroup when the processor implements GroupProcessor,
// each in its own transaction otherwise. spares are more candidates, shared
// out among the groups, that a group fences in place of members it loses
// at its fence (up to its size, never more).
func (d *Distributor) claimFreshAll(cands, spares []taskstore.Candidate) {
	gp, ok := d.proc.(GroupProcessor)
	if !ok || d.cfg.ClaimGroup < 2 || len(cands) < 2 {
		for _, c := range cands {
			d.claimFresh(c)
		}
		return
	}
	// As many groups as ClaimGroup requires, of even sizes; no more
	// members than the group's items allow (one each at least).
	size := min(d.cfg.ClaimGroup, d.size.groupLimit())
	if size < 2 {
		for _, c := range cands {
			d.claimFresh(c)
		}
		return
	}
	groups := (len(cands) + size - 1) / size
	for ; groups > 0; groups-- {
		n := (len(cands) + groups - 1) / groups
		g := cands[:n:n]
		cands = cands[n:]
		if len(g) == 1 {
			d.claimFresh(g[0])
			continue
		}
		k := (len(spares) + groups - 1) / groups
		sp := spares[:k:k]
		spares = spares[k:]
		d.mu.Lock()
		for _, c := range g {
			d.claiming[c.Key] = struct{}{}
		}
		for _, c := range sp {
			d.claiming[c.Key] = struct{}{}
		}
		d.mu.Unlock()
		d.wg.Add(1)
		go d.runClaimGroup(gp, g, sp)
	}
}

// groupOutcome is what a group's transaction did.
type groupOutcome struct {
	// lost are the candidates lost at the fence, left out of the group.
	lost []taskstore.Candidate
	// untried are spares the fence did not need.
	untried []taskstore.Candidate
	// members are the candidates fenced, in the group's order.
	members []taskstore.Candidate
	// committed are the members' first batches, once committed.
	committed []firstBatch
	// items is the most items the members' first batches were allowed
	// in all (their Limits).
	items int
	// elapsed is how long the transaction took, to its end or failure.
	elapsed time.Duration
	// unknown: the commit was sent and its outcome could not be learnt.
	unknown bool
}

// runClaimGroup runs a group's transaction over cands (reserved by
// claimFreshAll) and what follows it: the members committed are reported
// and released or held on; those lost at the fence are skipped for a
// while; after a rollback each member is claimed on its own.
func (d *Distributor) runClaimGroup(gp GroupProcessor, cands, spares []taskstore.Candidate) {
	defer d.wg.Done()
	out, err := d.claimGroup(gp, cands, spares)
	unreserve := func(cs []taskstore.Candidate) {
		d.mu.Lock()
		for _, c := range cs {
			delete(d.claiming, c.Key)
		}
		d.mu.Unlock()
	}
	unreserve(out.untried)
	if len(out.lost) > 0 {
		// As for a lone claim lost at its fence: skipped for a while.
		// Their room is given back once the group is over (the claim loop
		// is woken then), so that it is filled by a group of its own
		// rather than claim by claim while this group runs.
		d.mu.Lock()
		others := d.noteLost(out.lost)
		d.mu.Unlock()
		if others > 0 {
			d.emit(Event{Kind: EventClaimLost, Items: others})
		}
		defer d.wake()
	}
	switch {
	case err == nil:
		// The members released with their batches leave the worker's
		// count together, before the claim loop is woken: a round woken
		// by the first would otherwise see room for only one.
		d.mu.Lock()
		for _, fb := range out.committed {
			if fb.released {
				delete(d.claiming, fb.claimed.Key)
			}
		}
		d.mu.Unlock()
		for _, fb := range out.committed {
			d.claimedWithBatch(fb, false)
		}
		d.wake()
	case out.unknown:
		// If the commit applied, every member is owned (or released)
		// with a lease nobody renews: those expire and are taken over,
		// confirmed, from the committed checkpoints.
		unreserve(out.members)
		d.log.Warn("claim of a group with its first batches: commit outcome unknown; leaving the leases to expire",
			"partitions", len(out.members), "error", err)
	case d.isLeaving() || context.Cause(d.abandon) != nil:
		unreserve(out.members) // rolled back: nothing held, nothing to hand back
	case !errors.Is(err, taskstore.ErrClaimLost) && dberr.TooLong(err):
		// Rolled back: the group took longer than the statement timeout
		// or a lease allows. Groups take fewer items from now on, and
		// each member is claimed with its first batch on its own (a
		// first batch too long alone runs under heartbeats). Forming the
		// same group again would fail the same way, for ever.
		if errors.Is(err, context.DeadlineExceeded) {
			// Given up mid-statement: the server may hold the rows a
			// while longer; the members' own claims must not take that
			// for another worker's claim.
			d.markDying(out.members)
		}
		limit := d.size.groupTooLong(out.items, out.elapsed)
		d.log.Info("claim of a group with its first batches too long for one transaction; claiming each on its own",
			"partitions", len(out.members), "items", out.items, "group_limit", limit, "error", err)
		for _, c := range out.members {
			d.wg.Add(1)
			go d.runClaimBatch(c)
		}
	case !errors.Is(err, taskstore.ErrClaimLost) &&
		(dberr.Transient(err) || errors.Is(err, partition.ErrCheckpointMoved)):
		// Rolled back, every member claimable as before.
		unreserve(out.members)
		d.log.Debug("claim of a group with its first batches failed with a transient error; the partitions stay claimable",
			"partitions", len(out.members), "error", err)
		d.wake()
	default:
		// A member's claim was lost after processing, the processor
		// failed, or the group took longer than a lease: rolled back.
		// Each member is claimed with its first batch on its own, which
		// finds a lost one at its fence, records a processor error
		// against its partition, and runs a long batch under heartbeats.
		d.log.Debug("claim of a group with its first batches rolled back; claiming each on its own",
			"partitions", len(out.members), "error", err)
		for _, c := range out.members {
			d.wg.Add(1)
			go d.runClaimBatch(c)
		}
	}
}

// claimedWithBatch reports a committed claim made with its first batch and
// either ends it (released with that batch) or holds the partition on:
// leader mode, or work left after the first batch. With unreserve, a
// release also takes the partition out of the worker's count and wakes
// the claim loop (a group does both for all its members at once).
func (d *Distributor) claimedWithBatch(fb firstBatch, unreserve bool) {
	d.reportClaim(fb.claimed)
	d.reportCheckpoint(fb.claimed.Lease, fb.items, fb.position, fb.elapsed)
	if fb.released {
		if unreserve {
			d.mu.Lock()
			delete(d.claiming, fb.claimed.Key)
			d.mu.Unlock()
		}
		d.emit(Event{Kind: EventReleased, Key: fb.claimed.Key, Version: fb.claimed.Version, Reason: "caught_up"})
		d.log.Info("released partition", "event", "released", d.cfg.KeyAttr, fb.claimed.Key, "version", fb.claimed.Version,
			"reason", "caught_up", "with_batch", true, "with_claim", true)
		if unreserve {
			d.wake()
		}
		return
	}
	c := fb.claimed
	c.Position = fb.position // after its first batch
	d.startHeld(c, fb.sent, true, nil, true)
}

// claimGroup runs a group's transaction: fence (cands, and spares in place
// of those lost), the processor's group, claim and checkpoints of every
// member (and in lock mode the release of those caught up), commit.
func (d *Distributor) claimGroup(gp GroupProcessor, cands, spares []taskstore.Candidate) (out groupOutcome, err error) {
	// The group may take no longer than a lease less the safety margin,
	// as a lone first batch (claimBatch).
	ctx, cancel := context.WithTimeoutCause(d.base, d.cfg.StaleAfter-d.cfg.SafetyMargin, context.DeadlineExceeded)
	defer cancel()
	ctx, cancelCause := context.WithCancelCause(ctx)
	defer cancelCause(nil)
	stop := context.AfterFunc(d.abandon, func() { cancelCause(context.Cause(d.abandon)) })
	defer stop()
	out.members, out.untried = cands, spares
	start := d.cfg.Clock.Now()
	defer func() { out.elapsed = d.cfg.Clock.Since(start) }()
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return out, fmt.Errorf("beginning claim of %d partitions with their first batches: %w", len(cands), causeOr(ctx, err))
	}
	defer func() { _ = conn.Close() }()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return out, fmt.Errorf("beginning claim of %d partitions with their first batches: %w", len(cands), causeOr(ctx, err))
	}
	defer func() { _ = tx.Rollback() }()
	if err := d.db.SetLocalTimeouts(ctx, tx); err != nil {
		return out, fmt.Errorf("beginning claim of %d partitions with their first batches: %w", len(cands), causeOr(ctx, err))
	}
	tried := slices.SortedFunc(slices.Values(slices.Concat(cands, spares)), func(a, b taskstore.Candidate) int {
		return strings.Compare(a.Key, b.Key)
	})
	fenced, err := d.store.FenceUnownedGroup(ctx, tx, tried, len(cands))
	if err != nil {
		return out, causeOr(ctx, err)
	}
	// The fence tried candidates in key order until it had fenced as many
	// as the group's size: those it passed over were lost, those after
	// the last it fenced were not tried (when it stopped at the limit).
	if len(fenced) == len(cands) {
		last := fenced[len(fenced)-1].Key
		i, _ := slices.BinarySearchFunc(tried, last, func(c taskstore.Candidate, k string) int { return strings.Compare(c.Key, k) })
		tried, out.untried = tried[:i+1], tried[i+1:]
	} else {
		out.untried = nil
	}
	in := make(map[string]bool, len(fenced))
	for _, f := range fenced {
		in[f.Key] = true
	}
	out.members = make([]taskstore.Candidate, 0, len(fenced))
	for _, c := range tried {
		if in[c.Key] {
			out.members = append(out.members, c)
		} else {
			out.lost = append(out.lost, c)
		}
	}
	if len(fenced) == 0 {
		return out, nil
	}
	// A span for the group's transaction, and in it one "baton.batch"
	// span per member, as for a lone first batch (each linked to the
	// batch its checkpoint comes from, and stored with its checkpoint).
	var items int64
	ctx, span := tracer.Start(ctx, "baton.claim_group", trace.WithAttributes(
		attribute.String("baton.worker", d.worker.InstanceID), attribute.Int("baton.group", len(fenced))))
	g := &Group{Owner: d.worker.InstanceID, Tx: tx, Conn: conn, Batches: make([]*Batch, len(fenced)),
		Prepare: d.db.Direct()}
	spans := make([]trace.Span, len(fenced))
	traces := make([]string, len(fenced))
	pending := make([]int64, len(fenced))
	for i, f := range fenced {
		pending[i] = f.Checkpoint.Available - f.Checkpoint.Position
	}
	limits := shareItems(pending, d.size.batchLimit(), d.size.groupLimit())
	for i, f := range fenced {
		cp := f.Checkpoint
		l := partition.Lease{Key: f.Key, Version: f.Version + 1}
		bctx, bspan := tracer.Start(ctx, "baton.batch", d.leaseAttrs(l), trace.WithAttributes(
			attribute.Int64("baton.position", cp.Position), attribute.Bool("baton.with_claim", true)))
		linkPrevious(bspan, cp.Traceparent)
		spans[i], traces[i] = bspan, traceparentOf(bctx)
		g.Batches[i] = &Batch{Kind: d.cfg.Kind, Lease: l, Owner: d.worker.InstanceID, Tx: tx, Conn: conn, Checkpoint: cp, Limit: limits[i],
			Partition: partition.PartitionOf(l.Key)}
		out.items += limits[i]
	}
	var steps []taskstore.ClaimStep
	defer func() {
		for i, bspan := range spans {
			var n int64
			caughtUp := false
			if err == nil {
				n, caughtUp = steps[i].Position-steps[i].From, steps[i].Position >= g.Batches[i].Checkpoint.Available
				bspan.SetAttributes(attribute.Int64("baton.position", steps[i].Position), attribute.Bool("baton.first_batch", true),
					attribute.Bool("baton.takeover", false))
			}
			endBatchSpan(bspan, n, caughtUp, err)
		}
		span.SetAttributes(attribute.Int64("baton.items", items))
		endSpan(span, err)
	}()
	results, err := d.processGroup(ctx, gp, g)
	if err != nil {
		return out, causeOr(ctx, err)
	}
	steps = make([]taskstore.ClaimStep, len(fenced))
	for i, f := range fenced {
		b, res := g.Batches[i], results[i]
		cp := b.Checkpoint
		if res.Position <= cp.Position || res.Position > cp.Available {
			return out, fmt.Errorf("processing %s: processor returned position %d outside (%d, %d]",
				b.Lease, res.Position, cp.Position, cp.Available)
		}
		items += res.Position - cp.Position
		steps[i] = taskstore.ClaimStep{Candidate: f.Candidate, From: cp.Position, Position: res.Position,
			State: res.State, Release: res.Position >= cp.Available && d.releasesCaughtUp(f.Key), Traceparent: traces[i]}
	}
	sent := d.cfg.Clock.Now()
	if err := d.claimAdvanceGroupTraced(ctx, tx, steps); err != nil {
		return out, causeOr(ctx, err)
	}
	watch := dbconn.WatchConn(conn.Conn)
	if err := tx.Commit(); err != nil {
		if ctx.Err() != nil || !dberr.UnknownOutcome(err) {
			return out, fmt.Errorf("committing claim of %d partitions with their first batches: %w", len(fenced), causeOr(ctx, err))
		}
		// The commit may have applied with its reply lost: re-read one
		// member, which tells for all (one transaction).
		b := g.Batches[0]
		ok, rerr := d.resolveCommit(b.Lease, steps[0].Position, steps[0].Release)
		if rerr != nil && !errors.Is(rerr, partition.ErrFenced) {
			out.unknown = true
			return out, fmt.Errorf("committing claim of %d partitions with their first batches (outcome re-read: %v): %w",
				len(fenced), rerr, err)
		}
		if !ok {
			return out, fmt.Errorf("committing claim of %d partitions with their first batches (re-read: not applied): %w",
				len(fenced), err)
		}
		d.log.Info("commit outcome was unknown; re-read shows it applied", d.cfg.KeyAttr, b.Lease.Key,
			"version", b.Lease.Version, "partitions", len(fenced))
	}
	if watch.NotReplicated() {
		for i, st := range steps {
			d.reportNotReplicated(g.Batches[i].Lease, st.Position)
		}
	}
	elapsed := d.cfg.Clock.Since(start)
	d.size.groupTook(int(items), elapsed)
	out.committed = make([]firstBatch, len(fenced))
	for i, st := range steps {
		b := g.Batches[i]
		out.committed[i] = firstBatch{
			claimed:  taskstore.Claimed{Lease: b.Lease, Position: st.From, Available: b.Checkpoint.Available},
			items:    st.Position - st.From,
			position: st.Position,
			caughtUp: st.Position >= b.Checkpoint.Available,
			released: st.Release,
			elapsed:  elapsed,
			sent:     sent,
		}
	}
	return out, nil
}

// claimAdvanceGroupTraced is Store.ClaimAdvanceGroup in a "baton.claim"
// span, in ctx, the group's span's, whose trace context every member's
// checkpoint stores.
func (d *Distributor) claimAdvanceGroupTraced(ctx context.Context, tx bun.Tx, steps []taskstore.ClaimStep) error {
	released := 0
	for _, st := range steps {
		if st.Release {
			released++
		}
	}
	_, span := tracer.Start(ctx, "baton.claim", trace.WithAttributes(attribute.Int("baton.candidates", len(steps)),
		attribute.String("baton.worker", d.worker.InstanceID), attribute.Bool("baton.with_batch", true),
		attribute.Int("baton.released", released)))
	_, err := d.store.ClaimAdvanceGroup(ctx, tx, d.worker.InstanceID, d.cfg.StaleAfter, steps, "caught_up")
	won := 0
	if err == nil {
		won = len(steps)
	}
	span.SetAttributes(attribute.Int("baton.won", won))
	endSpan(span, err)
	return err
}
