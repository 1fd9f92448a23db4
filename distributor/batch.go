package distributor

import (
	"context"
	"errors"
	"fmt"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/dberr"
	"github.com/batonhq/baton/partition"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// batch runs one fenced transaction: lock and verify the task row, let the
// processor write, record the checkpoint, commit. In lock mode a batch that
// catches up also releases the partition in the same transaction (released):
// output, checkpoint and release take one commit and one WAL flush.
func (d *Distributor) batch(h *held) (items int64, caughtUp, released bool, err error) {
	l := h.lease
	ctx, cancel := context.WithCancelCause(l.Context())
	defer cancel(nil)
	stop := context.AfterFunc(d.abandon, func() { cancel(context.Cause(d.abandon)) })
	defer stop()
	ctx, span := tracer.Start(ctx, "baton.batch", d.leaseAttrs(l.Lease))
	defer func() { endBatchSpan(span, items, caughtUp, err) }()

	start := d.cfg.Clock.Now()
	h.tried = 0
	defer func() { h.took = d.cfg.Clock.Since(start) }()
	// A connection of its own, so that the processor can reach the
	// driver's connection inside the transaction (Batch.Raw).
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return 0, false, false, fmt.Errorf("beginning batch of %s: %w", l.Lease, causeOr(ctx, err))
	}
	defer func() { _ = conn.Close() }()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return 0, false, false, fmt.Errorf("beginning batch of %s: %w", l.Lease, causeOr(ctx, err))
	}
	defer func() { _ = tx.Rollback() }()
	if err := d.db.SetLocalTimeouts(ctx, tx); err != nil {
		return 0, false, false, fmt.Errorf("beginning batch of %s: %w", l.Lease, causeOr(ctx, err))
	}
	cp, err := d.store.Fence(ctx, tx, d.worker.InstanceID, l.Lease)
	if err != nil {
		return 0, false, false, causeOr(ctx, err)
	}
	if !h.started {
		linkPrevious(span, cp.Traceparent)
	}
	if cp.Position >= cp.Available {
		return 0, true, false, nil
	}
	b := &Batch{Kind: d.cfg.Kind, Lease: l.Lease, Owner: d.worker.InstanceID, Tx: tx, Conn: conn, Checkpoint: cp,
		Limit: int(min(int64(d.size.batchLimit()), cp.Available-cp.Position)), Partition: partition.PartitionOf(l.Key)}
	h.tried = b.Limit
	res, segments, err := d.split(ctx, b)
	if err == nil && segments == 0 {
		res, err = d.process(ctx, b)
	}
	if err != nil {
		return 0, false, false, d.movedOr(ctx, l.Lease, cp.Position, causeOr(ctx, err))
	}
	if res.Position <= cp.Position || res.Position > cp.Available {
		return 0, false, false, fmt.Errorf("processing %s: processor returned position %d outside (%d, %d]",
			l.Lease, res.Position, cp.Position, cp.Available)
	}
	span.SetAttributes(attribute.Int64("baton.position", res.Position), attribute.Bool("baton.first_batch", !h.started),
		attribute.Bool("baton.takeover", h.takeover))
	if err := d.store.Advance(ctx, tx, l.Lease, cp.Position, res.Position, res.State); err != nil {
		return 0, false, false, d.movedOr(ctx, l.Lease, cp.Position, causeOr(ctx, err))
	}
	if !h.started {
		processed := res.Position - cp.Position
		if segments > 0 {
			processed = 0 // the items went to the segments
		}
		if err := d.store.RecordFirstBatch(ctx, tx, d.worker.InstanceID, l.Lease, res.Position,
			processed, h.prevBeat); err != nil {
			return 0, false, false, causeOr(ctx, err)
		}
	}
	caughtUp = res.Position >= cp.Available
	if caughtUp && d.releasesCaughtUp(l.Key) {
		// Hand the partition back in this transaction: the release locks
		// the row FOR UPDATE over the fence's FOR KEY SHARE (this
		// transaction's own, so no wait but for a renewal in flight) and
		// bumps the version; it commits with the output or not at all.
		l.SetReleasing(true)
		rctx, rspan := tracer.Start(ctx, "baton.release", d.leaseAttrs(l.Lease), trace.WithAttributes(
			attribute.String("baton.reason", "caught_up"), attribute.Bool("baton.with_batch", true)))
		keys, err := d.store.WithDB(tx).ReleaseFor(rctx, d.worker.InstanceID, "caught_up", []partition.Lease{l.Lease})
		if err == nil && len(keys) == 0 {
			err = fmt.Errorf("releasing %s with its last batch: %w", l.Lease, partition.ErrFenced)
		}
		endSpan(rspan, err)
		if err != nil {
			l.SetReleasing(false)
			return 0, false, false, causeOr(ctx, err)
		}
		released = true
	}
	watch := dbconn.WatchConn(conn.Conn)
	if err := tx.Commit(); err != nil {
		if ctx.Err() != nil || !dberr.UnknownOutcome(err) {
			l.SetReleasing(false)
			return 0, false, false, fmt.Errorf("committing batch of %s: %w", l.Lease, causeOr(ctx, err))
		}
		// The commit may have applied with its reply lost: re-read.
		if ok, rerr := d.resolveCommit(l.Lease, res.Position, released); rerr != nil || !ok {
			l.SetReleasing(false)
			return 0, false, false, fmt.Errorf("committing batch of %s (outcome re-read: %v): %w", l.Lease, rerr, err)
		}
		d.log.Info("commit outcome was unknown; re-read shows it applied", d.cfg.KeyAttr, l.Key, "version", l.Version)
	}
	if watch.NotReplicated() {
		d.reportNotReplicated(l.Lease, res.Position)
	}
	h.started = true
	h.pending.Store(max(0, cp.Available-res.Position))
	if segments > 0 {
		d.reportSplit(l.Lease, cp, segments)
		return 0, caughtUp, released, nil
	}
	items = res.Position - cp.Position
	elapsed := d.cfg.Clock.Since(start)
	d.size.batchTook(int(items), elapsed)
	d.reportCheckpoint(l.Lease, items, res.Position, elapsed)
	return items, caughtUp, released, nil
}

// movedOr tells a batch that collided with a late commit of its own claim
// from a real failure. When an earlier attempt's commit (whose outcome the
// worker could not learn) lands after the retry's fence read the old
// checkpoint, the retry writes the same output again and usually fails on
// the output's unique key (23505) before it reaches the checkpoint
// compare-and-set. That is a moved checkpoint, to be retried from the new
// position, not a processing error that counts towards quarantine: so a
// failed batch re-reads the checkpoint, and if it moved under the same
// claim the error becomes partition.ErrCheckpointMoved. Errors that are
// already transient, fenced or caused by the lease ending are left alone.
func (d *Distributor) movedOr(ctx context.Context, l partition.Lease, from int64, err error) error {
	if ctx.Err() != nil || dberr.Transient(err) || errors.Is(err, partition.ErrFenced) {
		return err
	}
	rctx, cancel := context.WithTimeout(context.Background(), d.cfg.StaleAfter/2)
	defer cancel()
	v, pos, rerr := d.admin.Progress(rctx, l.Key)
	if rerr != nil || v != l.Version || pos == from {
		return err
	}
	return fmt.Errorf("%w: it is at %d, not %d (a late commit of this claim landed): %w",
		partition.ErrCheckpointMoved, pos, from, err)
}

// resolveCommit re-reads a partition after a commit whose outcome is
// unknown: it applied if the checkpoint is at position under the claim's
// version, or, for a batch that also released the partition, under the
// version its release made (the next one: nobody else can have claimed it
// while the lease was live).
func (d *Distributor) resolveCommit(l partition.Lease, position int64, released bool) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.StaleAfter/2)
	defer cancel()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		v, pos, err := d.admin.Progress(ctx, l.Key)
		if err == nil {
			switch {
			case released && v == l.Version+1:
				return pos == position, nil
			case v != l.Version:
				return false, partition.ErrFenced
			}
			return pos == position, nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return false, lastErr
		case <-d.cfg.Clock.After(d.cfg.Heartbeat / 4):
		}
	}
	return false, lastErr
}

func (d *Distributor) process(ctx context.Context, b *Batch) (res Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("processor panicked on %s: %v", b.Lease, r)
		}
	}()
	res, err = d.proc.Process(ctx, b)
	if err != nil {
		err = fmt.Errorf("processing %s: %w", b.Lease, err)
	}
	return res, err
}

func causeOr(ctx context.Context, err error) error {
	if c := context.Cause(ctx); c != nil && !errors.Is(err, c) {
		return fmt.Errorf("%w (%w)", err, c)
	}
	return err
}
