package taskstore_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
)

// groupDB is claimBatchDB with partitions a, b, c, d of one item each (and
// k from claimBatchDB), and their candidates by key.
func groupDB(t *testing.T) (*bun.DB, *taskstore.Store, map[string]taskstore.Candidate) {
	t.Helper()
	db, s := claimBatchDB(t)
	if _, err := db.Exec(`INSERT INTO baton.tasks (partition_key, available) VALUES ('a', 1), ('b', 1), ('c', 1), ('d', 2)`); err != nil {
		t.Fatal(err)
	}
	cands, err := s.Candidates(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]taskstore.Candidate{}
	for _, c := range cands {
		byKey[c.Key] = c
	}
	return db, s, byKey
}

func pick(byKey map[string]taskstore.Candidate, keys ...string) []taskstore.Candidate {
	out := make([]taskstore.Candidate, len(keys))
	for i, k := range keys {
		out[i] = byKey[k]
	}
	return out
}

func fencedKeys(fs []taskstore.Fenced) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Key
	}
	return out
}

// A group is fenced in key order, whatever the candidates' order; a
// candidate another claim transaction fences is left out, not waited for;
// then every member is claimed, checkpointed and (when asked) released in
// one statement and one commit, each exactly as a lone ClaimAdvance would,
// and the worker's held count rises by the members kept.
func TestClaimGroupFencesInKeyOrderAndClaimsAllTogether(t *testing.T) {
	t.Parallel()
	db, s, byKey := groupDB(t)
	ctx := context.Background()
	if _, err := s.Heartbeat(ctx, taskstore.Worker{InstanceID: "w#1", Name: "w"}, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	other := beginTx(t, db)
	if _, err := fenceUnowned(ctx, s, other, byKey["b"]); err != nil {
		t.Fatal(err)
	}
	tx := beginTx(t, db)
	fenced, err := s.FenceUnownedGroup(ctx, tx, pick(byKey, "d", "b", "a", "c"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := fencedKeys(fenced); !slices.Equal(got, []string{"a", "c", "d"}) {
		t.Fatalf("fenced %v; want [a c d] (key order, b held by another claim transaction)", got)
	}
	for _, f := range fenced {
		if f.Version != byKey[f.Key].Version || f.Checkpoint.Position != 0 || f.Checkpoint.Available != map[string]int64{"a": 1, "c": 1, "d": 2}[f.Key] {
			t.Fatalf("fenced %+v; want the candidate's version and checkpoint", f)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO claim_output VALUES (?, 1)`, f.Key); err != nil {
			t.Fatal(err)
		}
	}
	steps := []taskstore.ClaimStep{
		{Candidate: fenced[0].Candidate, From: 0, Position: 1, Release: true},
		{Candidate: fenced[1].Candidate, From: 0, Position: 1, Release: true},
		{Candidate: fenced[2].Candidate, From: 0, Position: 1, State: []byte(`{"n": 1}`)}, // d: one of two items
	}
	leases, err := s.ClaimAdvanceGroup(ctx, tx, "w#1", time.Minute, steps, "caught_up")
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	for i, k := range []string{"a", "c"} {
		r := readTaskRow(t, db, k)
		if leases[i].Version != byKey[k].Version+1 || r.Version != byKey[k].Version+2 || r.Owner != nil || r.Position != 1 ||
			r.Events != 3 || r.Output != 1 {
			t.Fatalf("%s after the group: %+v (lease %v); want claimed and released, position 1, 3 events, 1 output row", k, r, leases[i])
		}
		if got := historyOf(t, db, k); !slices.Equal(got, []string{"claimed@1", "first_batch@1", "released@1"}) {
			t.Fatalf("%s: history %v", k, got)
		}
	}
	r := readTaskRow(t, db, "d")
	if r.Version != leases[2].Version || r.Owner == nil || *r.Owner != "w#1" || r.Position != 1 || r.Events != 2 {
		t.Fatalf("d after the group: %+v; want %v held by w#1 at position 1 with 2 events", r, leases[2])
	}
	var held, xmins int
	if err := db.QueryRowContext(ctx, `SELECT held FROM baton.workers WHERE instance_id = 'w#1'`).Scan(&held); err != nil || held != 1 {
		t.Fatalf("worker's held count = %d, %v; want 1 (d kept, a and c released)", held, err)
	}
	if err := db.QueryRowContext(ctx, `SELECT count(DISTINCT xmin::text) FROM baton.events`).Scan(&xmins); err != nil || xmins != 1 {
		t.Fatalf("the group's history was written by %d transactions (%v); want 1", xmins, err)
	}
	if r := readTaskRow(t, db, "b"); r.Version != byKey["b"].Version || r.Events != 0 {
		t.Fatalf("b, left out of the group: %+v; want untouched", r)
	}
}

// One member's claim lost (another transaction holds its row when the
// claim statement runs) fails the whole statement with ErrClaimLost; the
// rollback leaves every member as it was, output included.
func TestClaimGroupIsAllOrNothing(t *testing.T) {
	t.Parallel()
	db, s, byKey := groupDB(t)
	ctx := context.Background()
	before := map[string]taskRow{}
	for _, k := range []string{"a", "b", "c"} {
		before[k] = readTaskRow(t, db, k)
	}
	tx := beginTx(t, db)
	fenced, err := s.FenceUnownedGroup(ctx, tx, pick(byKey, "a", "b", "c"), 0)
	if err != nil || len(fenced) != 3 {
		t.Fatalf("fence = %v, %v; want all three", fencedKeys(fenced), err)
	}
	var steps []taskstore.ClaimStep
	for _, f := range fenced {
		if _, err := tx.ExecContext(ctx, `INSERT INTO claim_output VALUES (?, 1)`, f.Key); err != nil {
			t.Fatal(err)
		}
		steps = append(steps, taskstore.ClaimStep{Candidate: f.Candidate, From: 0, Position: 1, Release: true})
	}
	// A producer adding work to b, its transaction still open: its row lock
	// does not conflict with the fence, but the claim skips the row.
	producer := beginTx(t, db)
	if _, err := s.Admin().AddWorksTx(ctx, producer, []partition.Work{{Key: "b", N: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimAdvanceGroup(ctx, tx, "w#1", time.Minute, steps, "caught_up"); !errors.Is(err, taskstore.ErrClaimLost) {
		t.Fatalf("claim of a group with a member locked by a producer = %v; want ErrClaimLost", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c"} {
		if r := readTaskRow(t, db, k); r != before[k] {
			t.Fatalf("%s after the lost group: %+v; want %+v", k, r, before[k])
		}
	}
}

// Two transactions fencing overlapping groups in opposite orders never
// wait for each other: each gets the candidates the other does not hold.
func TestClaimGroupFencesDoNotWait(t *testing.T) {
	t.Parallel()
	db, s, byKey := groupDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	txA := beginTx(t, db)
	txB := beginTx(t, db)
	for _, tx := range []bun.Tx{txA, txB} {
		if _, err := tx.ExecContext(ctx, `SET LOCAL lock_timeout = '2s'`); err != nil {
			t.Fatal(err)
		}
	}
	a, err := s.FenceUnownedGroup(ctx, txA, pick(byKey, "a", "b", "c"), 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.FenceUnownedGroup(ctx, txB, pick(byKey, "d", "c", "b", "k"), 0)
	if err != nil {
		t.Fatalf("second group's fence: %v; want no wait", err)
	}
	if ga, gb := fencedKeys(a), fencedKeys(b); !slices.Equal(ga, []string{"a", "b", "c"}) || !slices.Equal(gb, []string{"d", "k"}) {
		t.Fatalf("fenced %v and %v; want [a b c] and [d k]", ga, gb)
	}
}

// beginTx begins a transaction rolled back when the test ends.
func beginTx(t *testing.T, db *bun.DB) bun.Tx {
	t.Helper()
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	return tx
}

// historyOf returns a partition's events as kind@version, oldest first.
func historyOf(t *testing.T, db *bun.DB, key string) []string {
	t.Helper()
	var out []string
	rows, err := db.Query(`SELECT kind || '@' || version FROM baton.events WHERE partition_key = ? ORDER BY event_id`, key)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// With a limit, the fence stops at the limit-th candidate fenced, in key
// order, passing over those it loses, and locks nothing past it.
func TestClaimGroupFenceStopsAtItsLimit(t *testing.T) {
	t.Parallel()
	db, s, byKey := groupDB(t)
	ctx := context.Background()
	other := beginTx(t, db)
	if _, err := fenceUnowned(ctx, s, other, byKey["b"]); err != nil {
		t.Fatal(err)
	}
	tx := beginTx(t, db)
	fenced, err := s.FenceUnownedGroup(ctx, tx, pick(byKey, "k", "d", "c", "b", "a"), 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := fencedKeys(fenced); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("fenced %v; want [a c] (b lost, the limit reached at c)", got)
	}
	// d and k were not tried: another claim transaction fences them.
	third := beginTx(t, db)
	if got, err := s.FenceUnownedGroup(ctx, third, pick(byKey, "a", "d", "k"), 0); err != nil || !slices.Equal(fencedKeys(got), []string{"d", "k"}) {
		t.Fatalf("another transaction's fence of a, d, k = %v, %v; want [d k] (a held, d and k never locked)", fencedKeys(got), err)
	}
}
