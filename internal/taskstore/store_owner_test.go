package taskstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
)

// The statements that name their task rows by key (fence, release,
// re-read, failure) read them through the primary key, never through
// tasks_owner, whatever the planner's statistics say. tasks_owner keeps an
// entry for every version that named an owner, and while another session
// holds an old snapshot none of them can be removed: a worker's entries
// grow with every claim it has made, and a statement reading its rows
// through that index walks them all. With statistics taken while nothing
// was owned (a freshly loaded table, as the bench's templates are), the
// partial owner index looks the cheaper way to one row: the fence read a
// worker's whole history that way at every batch.
func TestKeyedStatementsDoNotReadTheOwnerIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	if _, err := db.ExecContext(ctx, `
		INSERT INTO baton.tasks (partition_key, available) SELECT 'p' || i, 100 FROM generate_series(1, 500) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `ANALYZE baton.tasks`); err != nil {
		t.Fatal(err)
	}
	s := taskstore.NewStore(db, "")
	w := taskstore.Worker{InstanceID: "w#1", Name: "w"}
	if _, err := s.Heartbeat(ctx, w, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	cands, err := s.Candidates(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	won, err := s.Claim(ctx, w.InstanceID, time.Minute, cands)
	if err != nil || len(won) != 3 {
		t.Fatalf("claimed %v, %v; want 3", won, err)
	}
	leases := []partition.Lease{won[0].Lease, won[1].Lease, won[2].Lease}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	st := s.WithDB(tx)
	steps := []struct {
		name string
		run  func() error
		// scans of tasks_owner allowed: the heartbeat reads its worker's
		// own rows there once (the ones it does not list), and renews the
		// listed ones by key.
		scans int64
	}{
		{"Fence", func() error { _, err := s.Fence(ctx, tx, w.InstanceID, leases[0]); return err }, 0},
		{"Inspect", func() error { _, err := st.Inspect(ctx, w.InstanceID, leases); return err }, 0},
		{"Heartbeat", func() error { _, err := st.Heartbeat(ctx, w, time.Minute, leases); return err }, 1},
		{"ReleaseFor", func() error { _, err := st.ReleaseFor(ctx, w.InstanceID, "caught_up", leases[:1]); return err }, 0},
		{"Fail", func() error {
			_, err := st.Fail(ctx, w.InstanceID, leases[1], "boom", time.Second, time.Minute, 5)
			return err
		}, 0},
	}
	for _, step := range steps {
		before := ownerIndexScans(t, tx)
		if err := step.run(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if n := ownerIndexScans(t, tx) - before; n > step.scans {
			t.Errorf("%s scanned tasks_owner %d times; want at most %d: its rows read by key", step.name, n, step.scans)
		}
	}
}

// ownerIndexScans is how many scans of tasks_owner this transaction has
// made so far.
func ownerIndexScans(t *testing.T, tx bun.Tx) int64 {
	t.Helper()
	var n int64
	if err := tx.QueryRowContext(context.Background(),
		`SELECT pg_stat_get_xact_numscans('baton.tasks_owner'::regclass)`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
