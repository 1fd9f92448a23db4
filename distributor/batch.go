package distributor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/batonhq/baton/internal/dberr"
	"github.com/batonhq/baton/partition"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// A held partition's batches go through the fenced transaction (txn.go)
// with heldStatements: each member fenced by its own claim (version and
// owner), its checkpoint recorded by the compare-and-set on its version
// and position, and in lock mode (segments in either mode) released with
// its last batch. A lone batch (batch) is a group of one; heldgroup.go
// queues and groups several.

// batch runs h's next batch alone, as one fenced transaction: lock and
// verify the task row, let the processor write (or split the partition),
// record the checkpoint, commit. In lock mode a batch that catches up also
// releases the partition in the same transaction (released): output,
// checkpoint and release take one commit and one WAL flush.
func (d *Distributor) batch(h *held) (items int64, caughtUp, released bool, err error) {
	t := d.heldTxn(nil, []*held{h})
	if err := d.runTxn(t); err != nil {
		return 0, false, false, err
	}
	r := d.heldDone(t, t.members[0])
	return r.items, r.caughtUp, r.released, r.err
}

// heldTxn is the transaction of hs's batches: alone (gp nil, one member)
// or as a group.
func (d *Distributor) heldTxn(gp GroupProcessor, hs []*held) *txn {
	t := &txn{stmts: heldStatements{d}, lone: len(hs) == 1, group: gp, spanName: "baton.batch_group", spanFirst: true,
		resolveEach: true, batchBound: true, members: make([]*member, len(hs))}
	for i, h := range hs {
		t.members[i] = newMember(h.lease.Lease)
		t.members[i].h = h
	}
	t.what = fmt.Sprintf("batches of %d held partitions", len(hs))
	if t.lone {
		t.what = fmt.Sprintf("batch of %s", hs[0].lease.Lease)
	}
	return t
}

// heldDone is a held member's outcome once its transaction has run
// without failing, and what follows its commit.
func (d *Distributor) heldDone(t *txn, m *member) heldResult {
	switch {
	case m.err != nil:
		return heldResult{err: m.err}
	case !m.committed:
		return heldResult{caughtUp: m.caughtUp} // found caught up at the fence
	}
	h := m.h
	h.started = true
	h.pending.Store(max(0, m.cp.Available-m.res.Position))
	if m.segments > 0 {
		d.reportSplit(m.lease, m.cp, m.segments)
	} else {
		d.reportCheckpoint(m.lease, m.items, m.res.Position, t.elapsed)
	}
	return heldResult{items: m.items, caughtUp: m.caughtUp, released: m.released}
}

// heldStatements fence, advance and release held partitions.
type heldStatements struct{ d *Distributor }

// fence fences each member by its own claim, in key order. A lone batch
// fails with its fence's error; in a group a member lost there drops out
// with it (as a lone batch would), one found caught up is told so, and one
// that would split runs alone.
func (s heldStatements) fence(ctx context.Context, t *txn) ([]*member, error) {
	d := s.d
	order := slices.SortedFunc(slices.Values(t.members), func(a, b *member) int { return strings.Compare(a.lease.Key, b.lease.Key) })
	var in []*member
	for _, m := range order {
		cp, err := t.store.Fence(ctx, m.lease)
		switch {
		case errors.Is(err, partition.ErrFenced):
			m.state, m.err = memberOut, causeOr(ctx, err)
			continue
		case err != nil:
			return in, causeOr(ctx, err)
		case cp.Position >= cp.Available:
			m.state, m.caughtUp = memberOut, true
			continue
		case !t.lone && d.wouldSplit(m, cp):
			m.state = memberAlone
			continue
		}
		m.state, m.cp = memberIn, cp
		in = append(in, m)
	}
	return in, nil
}

// record advances every member's checkpoint (the compare-and-set on its
// version and position), records a claim's first batch, and releases the
// members caught up in one statement: FOR UPDATE over the fence's FOR KEY
// SHARE (this transaction's own, so no wait but for a renewal in flight),
// version bumped, committed with the output or not at all.
func (s heldStatements) record(ctx context.Context, t *txn) error {
	d := s.d
	var release []partition.Lease
	for _, m := range t.in {
		if err := t.store.Advance(m.ctx, m.lease, m.cp.Position, m.res.Position, m.res.State); err != nil {
			if t.lone {
				return d.movedOr(ctx, m.lease, m.cp.Position, causeOr(ctx, err))
			}
			return causeOr(ctx, err)
		}
		if !m.h.started {
			if err := t.store.RecordFirstBatch(m.ctx, m.lease, m.res.Position, m.items, m.h.prevBeat); err != nil {
				return causeOr(ctx, err)
			}
		}
		if m.release {
			m.h.lease.SetReleasing(true)
			release = append(release, m.lease)
		}
	}
	if len(release) == 0 {
		return nil
	}
	attrs := d.leaseAttrs(release[0])
	if !t.lone {
		attrs = trace.WithAttributes(attribute.Int("baton.partitions", len(release)))
	}
	rctx, rspan := tracer.Start(ctx, "baton.release", attrs, trace.WithAttributes(
		attribute.String("baton.reason", "caught_up"), attribute.Bool("baton.with_batch", true)))
	keys, err := t.store.ReleaseFor(rctx, "caught_up", release)
	switch {
	case err == nil && t.lone && len(keys) == 0:
		err = fmt.Errorf("releasing %s with its last batch: %w", release[0], partition.ErrFenced)
	case err == nil && len(keys) != len(release):
		err = fmt.Errorf("releasing %d partitions with their last batches, %d released: %w", len(release), len(keys), partition.ErrFenced)
	}
	endSpan(rspan, err)
	if err != nil {
		return causeOr(ctx, err)
	}
	for _, m := range t.in {
		m.released = m.release
	}
	return nil
}

// wouldSplit reports whether m's batch at cp would split its partition
// (split.go), which it then does alone.
func (d *Distributor) wouldSplit(m *member, cp partition.Checkpoint) bool {
	_, ok := d.proc.(Splitter)
	return ok && !m.segment() && cp.Available-cp.Position > 2*d.cfg.SegmentRecords
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
	v, pos, rerr := d.reread(l.Key, 1)
	if rerr != nil || v != l.Version || pos == from {
		return err
	}
	return fmt.Errorf("%w: it is at %d, not %d (a late commit of this claim landed): %w",
		partition.ErrCheckpointMoved, pos, from, err)
}
