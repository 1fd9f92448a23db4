package distributor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/dberr"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
	"github.com/uptrace/bun"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// A partition nobody owns (never owned, or released) needs no confirmation,
// so its claim shares a transaction with its first batch: claim
// compare-and-set (the row locked FOR UPDATE until commit, which fences the
// batch), output, checkpoint, and in lock mode, when that batch catches up,
// the release. A tiny partition then costs one transaction and one WAL
// flush. Whatever fails before the commit rolls everything back: the
// partition is as the candidate read saw it, claimable by anyone.

// claimFresh reserves room for an unowned candidate and claims it together
// with its first batch in the background.
func (d *Distributor) claimFresh(c taskstore.Candidate) {
	d.mu.Lock()
	d.claiming[c.Key] = struct{}{}
	d.mu.Unlock()
	d.wg.Add(1)
	go d.runClaimBatch(c)
}

// lostClaim is a candidate lost to another worker's claim transaction.
type lostClaim struct {
	version int64
	at      time.Time
}

// noteLost records candidates lost at their fence, to be skipped for a
// while (skipLost), except those lost to this worker's own dying
// transaction (d.dying), which are tried again at the next poll. It
// reports how many were lost to other workers. Called with d.mu.
func (d *Distributor) noteLost(cands []taskstore.Candidate) int {
	now := d.cfg.Clock.Now()
	n := 0
	for _, c := range cands {
		delete(d.claiming, c.Key)
		if until, ok := d.dying[c.Key]; ok {
			if now.Before(until) {
				continue
			}
			delete(d.dying, c.Key)
		}
		d.lostClaims[c.Key] = lostClaim{version: c.Version, at: now}
		n++
	}
	return n
}

// markDying records that this worker abandoned the claim transaction of
// cands mid-statement: until the server has noticed (by its statement
// timeout at the latest, StaleAfter/2 as ConnectionLimits recommends, or
// the lease's length if the embedder set none lower), a fence finding
// their rows locked is not another worker's doing.
func (d *Distributor) markDying(cands []taskstore.Candidate) {
	until := d.cfg.Clock.Now().Add(d.cfg.StaleAfter)
	d.mu.Lock()
	defer d.mu.Unlock()
	for k, t := range d.dying {
		if !t.After(d.cfg.Clock.Now()) {
			delete(d.dying, k)
		}
	}
	for _, c := range cands {
		d.dying[c.Key] = until
	}
}

// skipLost drops the candidates recently lost at the same version, and
// forgets lost candidates no longer read or moved on. Called with d.mu.
func (d *Distributor) skipLost(cands []taskstore.Candidate) []taskstore.Candidate {
	now := d.cfg.Clock.Now()
	keep := make(map[string]lostClaim, len(d.lostClaims))
	out := slices.DeleteFunc(cands, func(c taskstore.Candidate) bool {
		l, ok := d.lostClaims[c.Key]
		if !ok || l.version != c.Version || now.Sub(l.at) >= d.cfg.StaleAfter {
			return false
		}
		keep[c.Key] = l
		return true
	})
	d.lostClaims = keep
	return out
}

// errClaimLost: another worker claimed the candidate first.
var errClaimLost = taskstore.ErrClaimLost

// errClaimBusy: the claim's compare-and-set found the fenced row locked by
// another transaction (a producer adding work, a load: FOR NO KEY UPDATE,
// which the fence's FOR KEY SHARE lets through) and skipped it. No other
// worker claimed it: while the fence holds, nobody can change its version.
var errClaimBusy = errors.New("the fenced row was locked by another transaction at the claim's compare-and-set")

// firstBatch is what a claim's own transaction committed.
type firstBatch struct {
	claimed  taskstore.Claimed
	items    int64
	position int64
	caughtUp bool
	released bool
	elapsed  time.Duration
	// tried is the most items the batch was allowed (its Limit).
	tried int
	// sent is when the claim statement was sent, by the local clock: its
	// lease runs from its arrival, so the local deadline counts from here.
	sent time.Time
}

func (d *Distributor) runClaimBatch(c taskstore.Candidate) {
	defer d.wg.Done()
	fb, claimed, err := d.claimBatch(c)
	unreserve := func() {
		d.mu.Lock()
		delete(d.claiming, c.Key)
		d.mu.Unlock()
	}
	switch {
	case err == nil:
		d.claimedWithBatch(fb, true)
	case errors.Is(err, errClaimBusy):
		// Rolled back, still unowned at its version: tried again at the
		// next poll. Noted as lost, it would be skipped for StaleAfter by
		// this worker as by every other claimer that lost its fence to
		// this one, and the partition would wait that long for an owner.
		unreserve()
		d.emit(Event{Kind: EventClaimLost, Items: 1})
		d.log.Debug("claim with its first batch found its row locked by a producer; the partition stays claimable",
			d.cfg.KeyAttr, c.Key, "error", err)
	case errors.Is(err, errClaimLost):
		// Another worker is processing it (or claimed it): skip it for a
		// while rather than pick it again from the head of the index,
		// where it still reads as claimable, and look for another. Lost
		// to this worker's own dying transaction instead, it is tried
		// again at the next poll.
		d.mu.Lock()
		others := d.noteLost([]taskstore.Candidate{c})
		d.mu.Unlock()
		if others > 0 {
			d.emit(Event{Kind: EventClaimLost, Items: 1})
			d.wake()
		}
	case claimed:
		// The commit's outcome could not be learnt. If it applied, the
		// partition is owned with a lease nobody renews: it expires and
		// is taken over, confirmed, from the committed checkpoint.
		unreserve()
		d.log.Warn("claim with its first batch: commit outcome unknown; leaving the lease to expire",
			d.cfg.KeyAttr, c.Key, "error", err)
	case d.isLeaving() || context.Cause(d.abandon) != nil:
		unreserve() // rolled back: nothing held, nothing to hand back
	case dberr.TooLong(err):
		// Rolled back: the first batch takes longer than a lease, or than
		// the statement timeout. Claim it on its own and run its batches
		// under heartbeats, which renew the lease while a batch runs, and
		// with fewer items each (sizing.go).
		if errors.Is(err, context.DeadlineExceeded) {
			d.markDying([]taskstore.Candidate{c})
		}
		limit, _ := d.size.batchTooLong(fb.tried, fb.elapsed)
		d.log.Info("first batch too long for one transaction; claiming the partition on its own with smaller batches",
			d.cfg.KeyAttr, c.Key, "items", fb.tried, "batch_limit", limit, "error", err)
		d.claimAlone(c, nil, unreserve)
	case dberr.Transient(err) || errors.Is(err, partition.ErrCheckpointMoved):
		// Rolled back, the partition claimable as before: the next poll
		// tries again (the database may be out of reach; nothing was
		// lost, so this is no warning).
		unreserve()
		d.log.Debug("claim with its first batch failed with a transient error; the partition stays claimable",
			d.cfg.KeyAttr, c.Key, "error", err)
	default:
		// The processor failed (or the batch broke a rule): rolled back.
		// Claim it and record the failure, so that it backs off and is
		// quarantined after MaxAttempts as any failed batch.
		d.claimAlone(c, err, unreserve)
	}
}

// claimAlone claims c with a committed claim of its own after its combined
// transaction rolled back, and runs it as a claimed partition; with cause
// set, that run records the failure first.
func (d *Distributor) claimAlone(c taskstore.Candidate, cause error, unreserve func()) {
	ctx, cancel := context.WithTimeout(d.base, d.cfg.StaleAfter/2)
	defer cancel()
	sent := d.cfg.Clock.Now()
	won, err := d.claimTraced(ctx, []taskstore.Candidate{c})
	if err != nil && dberr.UnknownOutcome(err) {
		won, err = d.resolveClaims([]taskstore.Candidate{c})
	}
	if err != nil || len(won) == 0 {
		unreserve()
		if err != nil {
			level := slog.LevelWarn
			if dberr.Transient(err) {
				level = slog.LevelDebug // an outage, said once by the heartbeat's failures
			}
			d.log.Log(ctx, level, "could not claim a partition after its first batch failed; it stays claimable",
				d.cfg.KeyAttr, c.Key, "error", err, "batch_error", cause)
		} else {
			d.emit(Event{Kind: EventClaimLost, Items: 1})
		}
		d.wake()
		return
	}
	d.reportClaim(won[0])
	d.startHeld(won[0], sent, false, cause, true)
}

// claimBatch runs the claim's transaction: claim, first batch, and in lock
// mode the release when caught up. claimed reports that the commit was sent
// and its outcome is unknown.
func (d *Distributor) claimBatch(c taskstore.Candidate) (fb firstBatch, claimed bool, err error) {
	// A first batch may take no longer than a lease less the safety
	// margin, as any batch's local deadline allows; one that would is
	// rolled back and claimed on its own, to run under heartbeats.
	ctx, cancel := context.WithTimeoutCause(d.base, d.cfg.StaleAfter-d.cfg.SafetyMargin, context.DeadlineExceeded)
	defer cancel()
	ctx, cancelCause := context.WithCancelCause(ctx)
	defer cancelCause(nil)
	stop := context.AfterFunc(d.abandon, func() { cancelCause(context.Cause(d.abandon)) })
	defer stop()
	start := d.cfg.Clock.Now()
	defer func() {
		if err != nil {
			fb.elapsed = d.cfg.Clock.Since(start) // how long it took to fail
		}
	}()
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return fb, false, fmt.Errorf("beginning claim of %s with its first batch: %w", c.Key, causeOr(ctx, err))
	}
	defer func() { _ = conn.Close() }()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fb, false, fmt.Errorf("beginning claim of %s with its first batch: %w", c.Key, causeOr(ctx, err))
	}
	defer func() { _ = tx.Rollback() }()
	if err := d.db.SetLocalTimeouts(ctx, tx); err != nil {
		return fb, false, fmt.Errorf("beginning claim of %s with its first batch: %w", c.Key, causeOr(ctx, err))
	}
	cp, err := d.store.FenceUnowned(ctx, tx, c)
	if err != nil {
		return fb, false, causeOr(ctx, err)
	}
	// The lease this claim will have if it commits: the processor writes
	// under it, and its output commits with the claim or not at all.
	l := partition.Lease{Key: c.Key, Version: c.Version + 1}
	// Traced from here: a candidate lost at the fence was no batch.
	ctx, span := tracer.Start(ctx, "baton.batch", d.leaseAttrs(l), trace.WithAttributes(
		attribute.Int64("baton.position", cp.Position), attribute.Bool("baton.with_claim", true)))
	defer func() { endBatchSpan(span, fb.items, fb.caughtUp, err) }()
	linkPrevious(span, cp.Traceparent)
	b := &Batch{Kind: d.cfg.Kind, Lease: l, Owner: d.worker.InstanceID, Tx: tx, Conn: conn, Checkpoint: cp, Partition: partition.PartitionOf(l.Key),
		Limit: int(min(int64(d.size.batchLimit()), cp.Available-cp.Position))}
	fb.tried = b.Limit
	res, err := d.process(ctx, b)
	if err != nil {
		return fb, false, causeOr(ctx, err)
	}
	if res.Position <= cp.Position || res.Position > cp.Available {
		return fb, false, fmt.Errorf("processing %s: processor returned position %d outside (%d, %d]",
			l, res.Position, cp.Position, cp.Available)
	}
	span.SetAttributes(attribute.Int64("baton.position", res.Position), attribute.Bool("baton.first_batch", true),
		attribute.Bool("baton.takeover", false))
	fb.caughtUp = res.Position >= cp.Available
	fb.released = fb.caughtUp && d.releasesCaughtUp(l.Key)
	fb.sent = d.cfg.Clock.Now()
	if err := d.claimAdvanceTraced(ctx, tx, c, l, cp.Position, res.Position, res.State, fb.released); err != nil {
		if errors.Is(err, errClaimLost) && ctx.Err() == nil {
			err = fmt.Errorf("%w: %v", errClaimBusy, err)
		}
		return fb, false, causeOr(ctx, err)
	}
	watch := dbconn.WatchConn(conn.Conn)
	if err := tx.Commit(); err != nil {
		if ctx.Err() != nil || !dberr.UnknownOutcome(err) {
			return fb, false, fmt.Errorf("committing claim of %s with its first batch: %w", l, causeOr(ctx, err))
		}
		// The commit may have applied with its reply lost: re-read.
		ok, rerr := d.resolveCommit(l, res.Position, fb.released)
		if rerr != nil && !errors.Is(rerr, partition.ErrFenced) {
			return fb, true, fmt.Errorf("committing claim of %s with its first batch (outcome re-read: %v): %w", l, rerr, err)
		}
		if !ok {
			// Not applied: rolled back, the partition is claimable again.
			return fb, false, fmt.Errorf("committing claim of %s with its first batch (re-read: not applied): %w", l, err)
		}
		d.log.Info("commit outcome was unknown; re-read shows it applied", d.cfg.KeyAttr, l.Key, "version", l.Version)
	}
	if watch.NotReplicated() {
		d.reportNotReplicated(l, res.Position)
	}
	fb.claimed = taskstore.Claimed{Lease: l, Position: cp.Position, Available: cp.Available}
	fb.items = res.Position - cp.Position
	fb.position = res.Position
	fb.elapsed = d.cfg.Clock.Since(start)
	d.size.batchTook(int(fb.items), fb.elapsed)
	return fb, false, nil
}

// claimAdvanceTraced is Store.ClaimAdvance in a "baton.claim" span and,
// when it releases, a "baton.release" span over the same statement.
// The statement runs in ctx, the batch's span's, whose trace context the
// checkpoint stores.
func (d *Distributor) claimAdvanceTraced(ctx context.Context, tx bun.Tx, c taskstore.Candidate, l partition.Lease,
	from, position int64, state []byte, release bool) error {
	sctx, span := tracer.Start(ctx, "baton.claim", trace.WithAttributes(attribute.Int("baton.candidates", 1),
		attribute.String("baton.worker", d.worker.InstanceID), attribute.Bool("baton.with_batch", true)))
	var rspan trace.Span
	if release {
		_, rspan = tracer.Start(sctx, "baton.release", d.leaseAttrs(l), trace.WithAttributes(
			attribute.String("baton.reason", "caught_up"), attribute.Bool("baton.with_batch", true),
			attribute.Bool("baton.with_claim", true)))
	}
	_, err := d.store.ClaimAdvance(ctx, tx, d.worker.InstanceID, d.cfg.StaleAfter, c, from, position, state, release, "caught_up")
	won := 0
	if err == nil {
		won = 1
	}
	span.SetAttributes(attribute.Int("baton.won", won))
	if rspan != nil {
		endSpan(rspan, err)
	}
	endSpan(span, err)
	return err
}
