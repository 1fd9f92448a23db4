package partition_test

import (
	"context"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/partition"
)

// A row another transaction holds locked (a load adding work keeps its lock
// until it commits) does not hold up or fail the heartbeat: the other
// leases are renewed at once, and the locked one is reported as still held,
// not renewed, with the time it has left.
func TestHeartbeatSkipsRowsLockedByOthers(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	s := partition.NewStore(db, "")
	if _, err := db.ExecContext(ctx, `INSERT INTO baton.tasks (partition_key, available) VALUES ('a', 5), ('b', 5), ('c', 5)`); err != nil {
		t.Fatal(err)
	}
	cands, err := s.Candidates(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	won, err := s.Claim(ctx, "w#1", time.Minute, cands)
	if err != nil || len(won) != 3 {
		t.Fatalf("claimed %d, %v", len(won), err)
	}
	leases := make([]partition.Lease, len(won))
	for i, c := range won {
		leases[i] = c.Lease
	}
	load, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer load.Rollback()
	if _, err := load.ExecContext(ctx, `SELECT 1 FROM baton.tasks WHERE partition_key = 'b' FOR NO KEY UPDATE`); err != nil {
		t.Fatal(err)
	}
	var before time.Time
	if err := db.QueryRowContext(ctx, `SELECT lease_expires_at FROM baton.tasks WHERE partition_key = 'b'`).Scan(&before); err != nil {
		t.Fatal(err)
	}

	// Waiting for the lock without bound (there is no lock_timeout here)
	// would run into this deadline and fail the whole renewal; the
	// heartbeat waits for this row at most half of what is left.
	hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ren, err := s.Heartbeat(hctx, partition.Worker{InstanceID: "w#1", Name: "w"}, time.Minute, leases)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]partition.Renewal{}
	for _, r := range ren {
		got[r.Key] = r
	}
	if len(got) != 3 || got["a"].Locked || got["c"].Locked || !got["b"].Locked {
		t.Fatalf("renewals %+v, want a and c renewed, b reported locked", ren)
	}
	if rem := got["b"].Remaining; rem <= 0 || rem > time.Minute {
		t.Fatalf("locked lease has %s left, want within (0, 1m]", rem)
	}
	if err := load.Commit(); err != nil {
		t.Fatal(err)
	}
	var after time.Time
	if err := db.QueryRowContext(ctx, `SELECT lease_expires_at FROM baton.tasks WHERE partition_key = 'b'`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if !after.Equal(before) {
		t.Fatalf("the skipped lease moved from %s to %s", before, after)
	}
	// Once the lock is gone, the next heartbeat renews it.
	ren, err = s.Heartbeat(ctx, partition.Worker{InstanceID: "w#1", Name: "w"}, time.Minute, leases)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range ren {
		if r.Locked {
			t.Fatalf("%s still reported locked after the other transaction committed", r.Key)
		}
	}
	if len(ren) != 3 {
		t.Fatalf("renewed %d, want 3", len(ren))
	}
}
