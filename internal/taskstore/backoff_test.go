package taskstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
)

// The failure back-off backoff × 2^(attempts−1) is capped by maxBackoff
// without overflowing on the way, however long the settings.
func TestFailBackoffDoesNotOverflow(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	s := taskstore.NewStore(db, "")
	if _, err := db.ExecContext(ctx, `INSERT INTO baton.tasks (partition_key, available) VALUES ('k', 1)`); err != nil {
		t.Fatal(err)
	}
	const (
		backoff    = 100 * 365 * 24 * time.Hour // a century: ×2^12 passes 2^63 µs
		maxBackoff = 200 * 365 * 24 * time.Hour
	)
	for attempt := 1; attempt <= 40; attempt++ {
		// Claim it again (the back-off has put its lease far in the future).
		var l partition.Lease
		if err := db.QueryRowContext(ctx, `UPDATE baton.tasks SET owner = 'w#1', version = version + 1
			WHERE partition_key = 'k' RETURNING partition_key, version`).Scan(&l.Key, &l.Version); err != nil {
			t.Fatal(err)
		}
		r, err := s.Fail(ctx, "w#1", l, "boom", backoff, maxBackoff, 100)
		if err != nil {
			t.Fatalf("attempt %d: %v", attempt, err)
		}
		want := maxBackoff // 2 × backoff from the second attempt on
		if attempt == 1 {
			want = backoff
		}
		if r.Attempts != attempt || r.Quarantined || r.RetryAfter != want {
			t.Fatalf("attempt %d: %+v, want retry after %s", attempt, r, want)
		}
	}
}
