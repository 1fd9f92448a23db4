package partition_test

import (
	"context"
	"testing"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/partition"
)

// A split partition is listed once, with its segments not caught up
// folded in: their pending items, the processed prefix, how many there
// are and are held, the most pressing state and a failing segment's
// error; segment rows are not listed. Retrying the partition re-enables
// its quarantined segment.
func TestStatusFoldsSegmentsIntoTheirPartition(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	s := partition.NewStore(pgtest.Handle(db), "").Kind("orders")
	for key, n := range map[string]int64{"c": 3000, "plain": 10} {
		if _, err := s.AddWork(ctx, key, n); err != nil {
			t.Fatal(err)
		}
	}
	// c was split into three segments: the first caught up, the second
	// held by a worker at 1200, the third quarantined; its own row moved
	// to 3000, past them.
	for _, q := range []string{
		`UPDATE baton.tasks SET position = 3000 WHERE kind = 'orders' AND partition_key = 'c'`,
		`INSERT INTO baton.tasks (kind, partition_key, segment_of, generation, position, available)
		 VALUES ('orders', '` + partition.SegmentKey("c", 0) + `', 'c', 1, 1000, 1000)`,
		`INSERT INTO baton.tasks (kind, partition_key, segment_of, generation, position, available, owner, heartbeat_at, lease_expires_at)
		 VALUES ('orders', '` + partition.SegmentKey("c", 1000) + `', 'c', 1, 1200, 2000, 'w#1', now(), now() + interval '1 hour')`,
		`INSERT INTO baton.tasks (kind, partition_key, segment_of, generation, position, available, failed_at, attempts, last_error, lease_expires_at)
		 VALUES ('orders', '` + partition.SegmentKey("c", 2000) + `', 'c', 1, 2000, 3000, now(), 5, 'boom', 'infinity')`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	parts, _, err := s.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 2 || parts[0].Key != "c" || parts[1].Key != "plain" {
		t.Fatalf("status lists %+v; want c and plain only", parts)
	}
	c, plain := parts[0], parts[1]
	if c.Pending != 1800 || c.Processed != 1200 || c.DoneThrough != 1200 || c.Segments != 2 || c.SegmentsOwned != 1 ||
		c.State != partition.StateQuarantined || c.Attempts != 5 || c.Error != "items 2001–3000: boom" || c.Owner != "" {
		t.Fatalf("c: %+v", c)
	}
	if plain.Pending != 10 || plain.Processed != 0 || plain.DoneThrough != 0 || plain.Segments != 0 || plain.State != partition.StatePending {
		t.Fatalf("plain: %+v", plain)
	}

	ok, err := s.Retry(ctx, "c")
	if err != nil || !ok {
		t.Fatalf("retrying c: %v, %v", ok, err)
	}
	parts, _, err = s.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c := parts[0]; c.State != partition.StateActive || c.Attempts != 0 || c.Error != "" || c.Pending != 1800 {
		t.Fatalf("c after retry: %+v", c)
	}
}
