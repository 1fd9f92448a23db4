package taskstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
)

// A split deletes the partition's finished segments before it inserts
// its own, so a finished segment at one of its starts (one left by an
// earlier generation) is replaced rather than failing the split on the
// primary key; a pending segment of an earlier generation at another
// start is left alone.
func TestSplitReplacesAFinishedSegmentAtTheSameStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	s := taskstore.NewStore(db, "")
	if _, err := db.ExecContext(ctx, `
		INSERT INTO baton.tasks (kind, partition_key, segment_of, generation, position, available)
		VALUES ('default', 'p', NULL, 2, 0, 30),
		       ('default', ?, 'p', 1, 15, 15),
		       ('default', ?, 'p', 1, 40, 45)`,
		partition.SegmentKey("p", 0), partition.SegmentKey("p", 40)); err != nil {
		t.Fatal(err)
	}
	cands, err := s.Candidates(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	var won []taskstore.Claimed
	for _, c := range cands {
		if c.Key == "p" {
			if won, err = s.Claim(ctx, "w#1", time.Minute, []taskstore.Candidate{c}); err != nil || len(won) != 1 {
				t.Fatalf("claiming p: %v, %v", won, err)
			}
		}
	}
	if len(won) != 1 {
		t.Fatalf("p is not claimable; candidates %v", cands)
	}
	l := won[0].Lease
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	cp, err := s.Fence(ctx, tx, "w#1", l)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Split(ctx, tx, l, cp.Generation, []taskstore.Segment{{Start: 0, End: 15}, {Start: 15, End: 30}}); err != nil {
		t.Fatalf("splitting over a finished segment at the same start: %v", err)
	}
	if err := s.Advance(ctx, tx, l, 0, 30, nil); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var rows []struct {
		Key                             string `bun:"partition_key"`
		Generation, Position, Available int64
	}
	if err := db.NewRaw(`SELECT partition_key, generation, position, available FROM baton.tasks
		WHERE segment_of = 'p' ORDER BY partition_key`).Scan(ctx, &rows); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		key                             string
		generation, position, available int64
	}{{partition.SegmentKey("p", 0), 2, 0, 15}, {partition.SegmentKey("p", 15), 2, 15, 30}, {partition.SegmentKey("p", 40), 1, 40, 45}}
	if len(rows) != len(want) {
		t.Fatalf("segments after the split: %+v, want %+v", rows, want)
	}
	for i, w := range want {
		if r := rows[i]; r.Key != w.key || r.Generation != w.generation || r.Position != w.position || r.Available != w.available {
			t.Errorf("segment %d: %+v, want %+v", i, r, w)
		}
	}
}
