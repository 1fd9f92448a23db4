package distributor

import (
	"context"
	"fmt"

	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
)

// split splits b's partition into segments when it should (see Splitter):
// the processor is a Splitter, the partition is not itself a segment, and
// more than 2 × SegmentRecords items are pending. It writes the segments
// in b.Tx and returns the partition's new checkpoint (Available, the
// processor's End) and how many segments it wrote; zero segments means
// the batch processes as usual.
func (d *Distributor) split(ctx context.Context, b *Batch) (Result, int, error) {
	sp, ok := d.proc.(Splitter)
	cp := b.Checkpoint
	size := d.cfg.SegmentRecords
	if !ok || b.Partition != b.Lease.Key || cp.Available-cp.Position <= 2*size {
		return Result{}, 0, nil
	}
	s, err := callSplit(ctx, sp, b, size)
	if err != nil || len(s.Points) == 0 {
		return Result{}, 0, err
	}
	if len(s.End) == 0 {
		return Result{}, 0, fmt.Errorf("splitting %s: the processor gave no state for position %d", b.Lease, cp.Available)
	}
	segs := make([]taskstore.Segment, 0, len(s.Points)+1)
	start, state := cp.Position, cp.State
	for _, p := range s.Points {
		if p.Position <= start || p.Position >= cp.Available {
			return Result{}, 0, fmt.Errorf("splitting %s: split point %d outside (%d, %d) or out of order",
				b.Lease, p.Position, start, cp.Available)
		}
		segs = append(segs, taskstore.Segment{Start: start, End: p.Position, State: state})
		start, state = p.Position, p.State
	}
	segs = append(segs, taskstore.Segment{Start: start, End: cp.Available, State: state})
	if err := d.store.Split(ctx, b.Tx, b.Lease, max(cp.Generation, 1), segs); err != nil {
		return Result{}, 0, err
	}
	return Result{Position: cp.Available, State: s.End}, len(segs), nil
}

// callSplit calls the processor's Split, turning a panic into an error.
func callSplit(ctx context.Context, sp Splitter, b *Batch, size int64) (s Split, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("processor panicked splitting %s: %v", b.Lease, r)
		}
	}()
	s, err = sp.Split(ctx, b, size)
	if err != nil {
		err = fmt.Errorf("splitting %s: %w", b.Lease, err)
	}
	return s, err
}

// reportSplit emits and logs a committed split.
func (d *Distributor) reportSplit(l partition.Lease, cp partition.Checkpoint, segments int) {
	d.emit(Event{Kind: EventSplit, Key: l.Key, Version: l.Version, Items: segments, Position: cp.Available})
	d.log.Info("split partition into segments", "event", string(EventSplit), d.cfg.KeyAttr, l.Key, "version", l.Version,
		"segments", segments, "from", cp.Position, "to", cp.Available)
}

// releasesCaughtUp reports whether a partition (or, segment, a segment of
// one) that has caught up is released: in lock mode every one, in leader
// mode segments only (they get no more work).
func (d *Distributor) releasesCaughtUp(segment bool) bool {
	return d.cfg.Mode == ModeLock || segment
}
