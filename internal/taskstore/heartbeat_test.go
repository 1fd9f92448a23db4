package taskstore_test

import (
	"context"
	"github.com/batonhq/baton/internal/leaseinfo"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/taskstore"
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
	s := taskstore.NewStore(db, "")
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
	ren, err := s.Heartbeat(hctx, taskstore.Worker{InstanceID: "w#1", Name: "w"}, time.Minute, leases)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]leaseinfo.Renewal{}
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
	ren, err = s.Heartbeat(ctx, taskstore.Worker{InstanceID: "w#1", Name: "w"}, time.Minute, leases)
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

// A live worker's row past its lease is no other worker's to find (stale
// rows are dead workers'): the owner's next heartbeat hands back those of
// its rows it no longer lists (it stopped processing them) whose leases
// have ended, and only those, so they are claimable again as unowned rows.
func TestHeartbeatHandsBackItsRowsPastTheirLeases(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	s := taskstore.NewStore(db, "")
	w := taskstore.Worker{InstanceID: "w#1", Name: "w"}
	if _, err := db.ExecContext(ctx, `INSERT INTO baton.tasks (partition_key, available) VALUES ('listed', 5), ('dropped', 5), ('fresh', 5), ('done', 5)`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Heartbeat(ctx, w, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	cands, err := s.Candidates(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	won, err := s.Claim(ctx, w.InstanceID, time.Minute, cands)
	if err != nil || len(won) != 4 {
		t.Fatalf("claimed %v, %v", won, err)
	}
	lease := map[string]partition.Lease{}
	for _, c := range won {
		lease[c.Key] = c.Lease
	}
	// The leases of listed, dropped and done end; done has no work left.
	if _, err := db.ExecContext(ctx, `UPDATE baton.tasks SET lease_expires_at = now() - interval '1 millisecond',
		position = CASE WHEN partition_key = 'done' THEN 5 ELSE 0 END
		WHERE partition_key IN ('listed', 'dropped', 'done')`); err != nil {
		t.Fatal(err)
	}
	// w#1 is live: nobody else sees its rows as stale.
	if st, err := s.StaleCandidates(ctx, 10); err != nil || len(st) != 0 {
		t.Fatalf("StaleCandidates = %v, %v; want none (the owner is live)", st, err)
	}
	rs, err := s.Heartbeat(ctx, w, time.Minute, []partition.Lease{lease["listed"], lease["fresh"]})
	if err != nil || len(rs) != 2 {
		t.Fatalf("heartbeat: %+v, %v; want listed and fresh renewed", rs, err)
	}
	rows, err := db.QueryContext(ctx, `SELECT partition_key, version, coalesce(owner, ''), lease_expires_at > now() FROM baton.tasks ORDER BY partition_key`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var key, owner string
		var version int64
		var leased bool
		if err := rows.Scan(&key, &version, &owner, &leased); err != nil {
			t.Fatal(err)
		}
		handedBack := key == "dropped" || key == "done"
		if handedBack != (owner == "") || handedBack != (version == lease[key].Version+1) || !handedBack && !leased {
			t.Errorf("%s: version %d (claim's %d), owner %q, lease running %v; want handed back: %v",
				key, version, lease[key].Version, owner, leased, handedBack)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	cands, err = s.Candidates(ctx, 10)
	if err != nil || len(cands) != 1 || cands[0].Key != "dropped" || cands[0].Owned {
		t.Fatalf("candidates after the hand-back: %v, %v; want dropped, unowned", cands, err)
	}
	h, err := s.Admin().History(ctx, "dropped", 1)
	if err != nil || len(h) != 1 || h[0].Kind != partition.EventReleased || h[0].Detail != "expired" || h[0].Version != lease["dropped"].Version {
		t.Fatalf("dropped's last event: %+v, %v; want released (expired) under the claim's version", h, err)
	}
}
