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
	d.mu.Lock()
	live := d.liveWorkers
	d.mu.Unlock()
	s, err := callSplit(ctx, sp, b, segmentSize(cp.Available-cp.Position, size, live))
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

// segmentSize is the size segments of pending items are cut to:
// SegmentRecords (size), a little less when that makes their number a
// multiple of the live workers, so that the workers can share them
// evenly (9 segments of a 900,000-item backlog went 5 and 4 at best over
// 2 workers, and the one with 5 priced the last alone; 10 of 90,000 go 5
// and 5). Never below half of size: with more live workers than
// segments, the number is left as it is.
func segmentSize(pending, size int64, live int) int64 {
	n := (pending + size - 1) / size
	w := int64(live)
	if w < 2 || w > n || n%w == 0 {
		return size
	}
	n += w - n%w
	return (pending + n - 1) / n
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
