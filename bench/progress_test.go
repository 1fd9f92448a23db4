package main

import (
	"context"
	"testing"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/partition"
)

// A contract split into segments counts its segments' records, priced
// and not, once; its row's position, past them all, is not what is priced.
func TestPricingProgressCountsSegments(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO baton.tasks (kind, partition_key, available, position) VALUES
		 ('pricing', 'a', 3000, 3000), ('pricing', 'b', 10, 4), ('orders', 'a', 5, 0)`,
		`INSERT INTO baton.tasks (kind, partition_key, segment_of, generation, position, available) VALUES
		 ('pricing', '` + partition.SegmentKey("a", 0) + `', 'a', 1, 1000, 1000),
		 ('pricing', '` + partition.SegmentKey("a", 1000) + `', 'a', 1, 1200, 2000),
		 ('pricing', '` + partition.SegmentKey("a", 2000) + `', 'a', 1, 2000, 3000)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	priced, backlog, err := pricingProgress(ctx, db)
	if err != nil || priced != 1204 || backlog != 1806 {
		t.Fatalf("priced %d, backlog %d, %v; want 1204 and 1806", priced, backlog, err)
	}
}
