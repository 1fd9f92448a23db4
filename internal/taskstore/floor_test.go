package taskstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/uptrace/bun"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
)

// Whoever makes a row claimable, its claimable_at is the time of that
// write (the tasks_claimable_since trigger), so the claimable index is
// ordered by time: a producer's insert and update, a release, a retry, a
// back-off ended by hand. A failure's back-off keeps its end.
func TestClaimableSinceIsTheServersTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	s := taskstore.NewStore(db, "")
	at := func(key string) time.Time {
		t.Helper()
		var at *time.Time
		if err := db.QueryRow(`SELECT claimable_at FROM baton.tasks WHERE partition_key = ?`, key).Scan(&at); err != nil {
			t.Fatal(err)
		}
		if at == nil {
			return time.Time{}
		}
		return *at
	}
	now := func() time.Time {
		t.Helper()
		var n time.Time
		if err := db.QueryRow(`SELECT clock_timestamp()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	within := func(what, key string, from time.Time) {
		t.Helper()
		to := now()
		if got := at(key); got.Before(from) || got.After(to) {
			t.Errorf("%s: claimable_at of %s = %v, want the time of the write, within [%v, %v]", what, key, got, from, to)
		}
	}

	t0 := now()
	if _, err := s.Admin().AddWork(ctx, "a", 3); err != nil {
		t.Fatal(err)
	}
	within("inserted by a producer", "a", t0)

	// Claimed: not claimable. Released with work left: claimable from then.
	cands, err := s.Candidates(ctx, 10)
	if err != nil || len(cands) != 1 {
		t.Fatalf("Candidates = %v, %v", cands, err)
	}
	won, err := s.Claim(ctx, "w#1", time.Hour, cands)
	if err != nil || len(won) != 1 {
		t.Fatalf("Claim = %v, %v", won, err)
	}
	if got := at("a"); !got.IsZero() {
		t.Fatalf("claimed row claimable at %v", got)
	}
	t1 := now()
	if _, err := s.Release(ctx, "w#1", []partition.Lease{won[0].Lease}); err != nil {
		t.Fatal(err)
	}
	within("released with work left", "a", t1)

	// More work for a row already claimable keeps its place in line.
	before := at("a")
	if _, err := s.Admin().AddWork(ctx, "a", 1); err != nil {
		t.Fatal(err)
	}
	if got := at("a"); !got.Equal(before) {
		t.Errorf("more work moved a claimable row from %v to %v", before, got)
	}

	// A caught-up row turned pending by a producer, even by hand.
	if _, err := db.Exec(`INSERT INTO baton.tasks (kind, partition_key, available, position) VALUES ('default', 'b', 2, 2)`); err != nil {
		t.Fatal(err)
	}
	t2 := now()
	if _, err := db.Exec(`UPDATE baton.tasks SET available = available + 1 WHERE partition_key = 'b'`); err != nil {
		t.Fatal(err)
	}
	within("turned pending by hand-written SQL", "b", t2)

	// A failure's back-off keeps its end; ending it early (a retry, or by
	// hand) makes the row claimable from that write.
	cands, err = s.Candidates(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	won, err = s.Claim(ctx, "w#1", time.Hour, cands)
	if err != nil || len(won) != 2 {
		t.Fatalf("Claim = %v, %v", won, err)
	}
	t3 := now()
	for _, w := range won {
		if _, err := s.Fail(ctx, "w#1", w.Lease, "boom", time.Hour, time.Hour, 10); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"a", "b"} {
		if got := at(k); got.Before(t3.Add(59 * time.Minute)) {
			t.Errorf("backing off: claimable_at of %s = %v, want the back-off's end, about an hour after %v", k, got, t3)
		}
	}
	t4 := now()
	if changed, err := s.Admin().Retry(ctx, "a"); err != nil || !changed {
		t.Fatalf("Retry = %v, %v", changed, err)
	}
	within("retried during its back-off", "a", t4)
	t5 := now()
	if _, err := db.Exec(`UPDATE baton.tasks SET lease_expires_at = '-infinity' WHERE partition_key = 'b'`); err != nil {
		t.Fatal(err)
	}
	within("back-off ended by hand", "b", t5)
}

// While another session holds a snapshot, the index entries of claimed
// rows stay; a Store's reads start from its floor, below the earliest
// claimable row it last saw, and so walk a bounded part of the index
// rather than every entry the snapshot keeps, and find the same rows.
func TestFlooredReadsSkipWhatAHeldSnapshotKeeps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	s := taskstore.NewStore(db, "")
	taskstore.SetFloorMargin(s, time.Millisecond)

	report, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = report.Rollback() }()
	if _, err := report.Exec(`SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`); err != nil {
		t.Fatal(err)
	}
	if _, err := report.Exec(`SELECT count(*) FROM baton.tasks`); err != nil {
		t.Fatal(err)
	}

	const partitions, cycles = 300, 30
	var work []partition.Work
	for i := range partitions {
		work = append(work, partition.Work{Key: fmt.Sprintf("p%03d", i), N: 1_000_000})
	}
	if _, err := s.Admin().AddWorks(ctx, work); err != nil {
		t.Fatal(err)
	}
	// Every row claimed and released, again and again, as workers would:
	// each cycle leaves an index entry per row that the snapshot keeps.
	for range cycles {
		if _, err := db.Exec(`UPDATE baton.tasks SET owner = 'w#1', version = version + 1, lease_expires_at = now() + interval '1 hour'`); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(`UPDATE baton.tasks SET owner = NULL, version = version + 1, lease_expires_at = '-infinity'`); err != nil {
			t.Fatal(err)
		}
	}
	full := readCost(t, db, 10, "-infinity")
	first, err := s.Candidates(ctx, 10) // from the beginning: it has no floor yet
	if err != nil || len(first) != 10 {
		t.Fatalf("Candidates = %v, %v", first, err)
	}
	floor := taskstore.FloorArg(s)
	if floor == "-infinity" {
		t.Fatal("no floor after a read that found claimable rows")
	}
	floored := readCost(t, db, 10, floor)
	if floored*5 > full {
		t.Errorf("a read from the floor touched %d buffers, from the beginning %d: want a fraction", floored, full)
	}
	again, err := s.Candidates(ctx, 10) // from the floor
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(keysOf(first), keysOf(again)) {
		t.Errorf("from the floor: %v, from the beginning: %v", keysOf(again), keysOf(first))
	}
	t.Logf("claimable read with %d dead entries per live one: %d buffers from the beginning, %d from the floor", cycles, full, floored)
}

// A row made claimable by a transaction that commits long after (a
// producer's long transaction) may lie below a floor that moved on in
// the meantime: the producer's notification lowers the floor to it, and
// without one, the first read one full-read period (by the Store's clock)
// after the last full read, of the candidates or of the fair share, finds
// it and lowers the floor below it, so that the reads after it find it too
// and the load counts it.
func TestRowsBelowTheFloorAreFound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	clock := clockwork.NewFakeClock()
	s := taskstore.NewStore(db, "").FloorPolicy(0, time.Minute, clock.Now)
	taskstore.SetFloorMargin(s, 0) // the floor passes a row made claimable a moment before
	if _, err := s.Admin().AddWork(ctx, "early", 1); err != nil {
		t.Fatal(err)
	}
	unclaimed := func() int {
		t.Helper()
		l, err := s.FairShareLoad(ctx, "nobody", 100, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return l.Unclaimed
	}

	for _, how := range []string{"notification", "full read", "load"} {
		key := "late-" + how
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Admin().AddWorkTx(ctx, tx, key, 1); err != nil {
			t.Fatal(err)
		}
		var since time.Time
		if err := tx.QueryRow(`SELECT claimable_at FROM baton.tasks WHERE partition_key = ?`, key).Scan(&since); err != nil {
			t.Fatal(err)
		}
		// Meanwhile a read moves the floor above the uncommitted row.
		if _, err := db.Exec(`UPDATE baton.tasks SET lease_expires_at = '-infinity' WHERE partition_key = 'early'`); err != nil {
			t.Fatal(err)
		}
		if c, err := s.Candidates(ctx, 10); err != nil || len(c) == 0 {
			t.Fatalf("Candidates = %v, %v", c, err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if c, err := s.Candidates(ctx, 10); err != nil || slices.Contains(keysOf(c), key) {
			t.Fatalf("Candidates = %v, %v: the floor was expected to be past %s (the test's premise)", keysOf(c), err, key)
		}
		hidden := unclaimed()
		switch how {
		case "notification":
			s.LowerFloor(since)
		case "full read":
			clock.Advance(time.Minute - time.Millisecond)
			if c, err := s.Candidates(ctx, 10); err != nil || slices.Contains(keysOf(c), key) {
				t.Fatalf("within the full-read period: Candidates = %v, %v; want a read from the floor, past %s", keysOf(c), err, key)
			}
			clock.Advance(time.Millisecond)
			c, err := s.Candidates(ctx, 10)
			if err != nil || !slices.Contains(keysOf(c), key) {
				t.Fatalf("a full-read period on: Candidates = %v, %v; want %s among them", keysOf(c), err, key)
			}
		case "load":
			clock.Advance(time.Minute)
			if n := unclaimed(); n != hidden+1 {
				t.Fatalf("the load read a full-read period on counted %d unclaimed partitions, want %d (%s too)", n, hidden+1, key)
			}
		}
		// From now on every read finds it, from the floor: what found it
		// lowered the floor below it.
		for range 3 {
			c, err := s.Candidates(ctx, 10)
			if err != nil || !slices.Contains(keysOf(c), key) {
				t.Fatalf("after the %s: Candidates = %v, %v; want %s among them", how, keysOf(c), err, key)
			}
		}
		if n := unclaimed(); n != hidden+1 {
			t.Fatalf("after the %s the load counted %d unclaimed partitions, want %d (%s too)", how, n, hidden+1, key)
		}
		if _, err := db.Exec(`UPDATE baton.tasks SET position = available WHERE partition_key = ?`, key); err != nil {
			t.Fatal(err)
		}
	}
}

func keysOf(cs []taskstore.Candidate) []string {
	var keys []string
	for _, c := range cs {
		keys = append(keys, c.Key)
	}
	slices.Sort(keys)
	return keys
}

// readCost is the shared buffers the Candidates statement touches reading
// limit rows from floor.
func readCost(t *testing.T, db *bun.DB, limit int, floor string) int {
	t.Helper()
	var out string
	if err := db.DB.QueryRow(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+taskstore.StatementSQL("Candidates"),
		limit, partition.DefaultKind, floor).Scan(&out); err != nil {
		t.Fatal(err)
	}
	var plans []struct {
		Plan struct {
			Hit  int `json:"Shared Hit Blocks"`
			Read int `json:"Shared Read Blocks"`
		}
	}
	if err := json.Unmarshal([]byte(out), &plans); err != nil || len(plans) != 1 {
		t.Fatalf("reading the plan: %v\n%s", err, out)
	}
	return plans[0].Plan.Hit + plans[0].Plan.Read
}
