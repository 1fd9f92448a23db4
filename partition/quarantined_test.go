package partition_test

import (
	"context"
	"testing"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/partition"
)

// A partition counts once however many of its segments are quarantined,
// and only partitions of the store's kind count.
func TestQuarantinedPartitionsCountsSplitPartitionsOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	s := partition.NewStore(pgtest.Handle(db), "").Kind("orders")
	other := partition.NewStore(pgtest.Handle(db), "").Kind("refunds")
	for _, key := range []string{"c", "plain", "fine"} {
		if _, err := s.AddWork(ctx, key, 3000); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := other.AddWork(ctx, "r", 10); err != nil {
		t.Fatal(err)
	}
	if n, err := s.QuarantinedPartitions(ctx); err != nil || n != 0 {
		t.Fatalf("before any failure: %d, %v; want 0", n, err)
	}
	for _, q := range []string{
		`INSERT INTO baton.tasks (kind, partition_key, segment_of, generation, position, available, failed_at, attempts, lease_expires_at)
		 VALUES ('orders', '` + partition.SegmentKey("c", 0) + `', 'c', 1, 0, 1000, now(), 5, 'infinity'),
		        ('orders', '` + partition.SegmentKey("c", 1000) + `', 'c', 1, 1000, 2000, now(), 5, 'infinity')`,
		`UPDATE baton.tasks SET failed_at = now(), attempts = 5 WHERE partition_key IN ('plain', 'r')`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.QuarantinedPartitions(ctx); err != nil || n != 2 {
		t.Fatalf("c with two quarantined segments and plain: %d, %v; want 2", n, err)
	}
	if n, err := other.QuarantinedPartitions(ctx); err != nil || n != 1 {
		t.Fatalf("refunds: %d, %v; want 1", n, err)
	}
}
