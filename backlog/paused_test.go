package backlog_test

import (
	"context"
	"testing"
	"time"

	"github.com/batonhq/baton/backlog"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/partition"
)

// Paused work is counted apart: not pending, not lag, not in the workers
// needed; a paused partition counts with its segments once, a paused
// kind's partitions all count, caught up or not; pausing is not
// processing.
func TestPausedWorkIsCountedApart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	// k: b 30 pending (waited 90 s); c split, a segment with 30 pending
	// (waited an hour), its own row 10; d caught up. Kind "stopped" has e
	// with 5 pending and f caught up.
	exec(t, db, `INSERT INTO baton.tasks (kind, partition_key, available, position) VALUES
		('k', 'b', 30, 0), ('k', 'c', 110, 100), ('k', 'd', 10, 10), ('stopped', 'e', 5, 0), ('stopped', 'f', 3, 3)`)
	exec(t, db, `INSERT INTO baton.tasks (kind, partition_key, segment_of, available, position) VALUES ('k', ?, 'c', 50, 20)`,
		partition.SegmentKey("c", 0))
	now := dbNow(t, db)
	exec(t, db, `UPDATE baton.tasks SET pending_since = ? WHERE partition_key = 'b'`, now.Add(-90*time.Second))
	exec(t, db, `UPDATE baton.tasks SET pending_since = ? WHERE segment_of = 'c'`, now.Add(-time.Hour))
	h := pgtest.Handle(db)
	if _, err := partition.NewStore(h, "").Kind("k").Pause(ctx, "ops", "", "c", "not-yet"); err != nil {
		t.Fatal(err)
	}
	if _, err := partition.NewStore(h, "").Kind("stopped").Pause(ctx, "ops", ""); err != nil {
		t.Fatal(err)
	}
	r, err := backlog.New(h, backlog.Config{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	figs, err := r.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	k := one(t, figs, "k")
	if k.PendingItems != 30 || k.PendingPartitions != 1 || k.PausedItems != 40 || k.PausedPartitions != 1 {
		t.Errorf("k: pending %d items of %d partitions, paused %d of %d; want 30 of 1, 40 of 1",
			k.PendingItems, k.PendingPartitions, k.PausedItems, k.PausedPartitions)
	}
	if k.Lag != 90*time.Second {
		t.Errorf("k: lag %s, want 1m30s (b's; c's segment is paused)", k.Lag)
	}
	s := one(t, figs, "stopped")
	if s.PendingItems != 0 || s.PausedItems != 5 || s.PausedPartitions != 2 || s.Lag != 0 || s.WorkersNeeded != 0 {
		t.Errorf("stopped: pending %d, paused %d items of %d partitions, lag %s, workers needed %d; want 0, 5 of 2, 0, 0",
			s.PendingItems, s.PausedItems, s.PausedPartitions, s.Lag, s.WorkersNeeded)
	}
}
