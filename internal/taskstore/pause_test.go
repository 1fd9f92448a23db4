package taskstore_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/notify"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
)

// candidateKeys reads s's claimable rows (up to 100) and returns their keys,
// sorted.
func candidateKeys(t *testing.T, s *taskstore.Store) []string {
	t.Helper()
	cands, err := s.Candidates(context.Background(), 100)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, c := range cands {
		keys = append(keys, c.Key)
	}
	slices.Sort(keys)
	return keys
}

// A paused partition (with its segments), and every partition of a paused
// kind, including one created after the pause, is neither read as a
// candidate nor claimed, by an unowned claim or a takeover; work added
// while paused is kept; resuming announces the rows with the time they
// became claimable (no later than the earliest of them, which kept its
// place in line), and they are claimable at once.
func TestPausedPartitionsAreNotClaimed(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	db := pgtest.Open(t, url, dbconn.Options{})
	ctx := context.Background()
	listener := pgtest.Listen(t, url, notify.Channel)
	// a is split into a segment; dead is owned by a worker that is not
	// live, its lease ended (a takeover candidate).
	if _, err := db.ExecContext(ctx, `
		INSERT INTO baton.workers (instance_id, name, expires_at) VALUES ('dead#1', 'dead', now() - interval '1 hour');
		INSERT INTO baton.tasks (partition_key, available, position) VALUES ('a', 10, 0), ('b', 10, 0);
		INSERT INTO baton.tasks (partition_key, segment_of, available, position) VALUES ('a#00000000000000000000', 'a', 5, 0);
		INSERT INTO baton.tasks (partition_key, available, position, owner, lease_expires_at)
		VALUES ('dead', 10, 0, 'dead#1', now() - interval '1 minute')`); err != nil {
		t.Fatal(err)
	}
	s := taskstore.NewStore(db, "")
	admin := partition.NewStore(pgtest.Handle(db), "")
	if got := candidateKeys(t, s); !slices.Equal(got, []string{"a", "a#00000000000000000000", "b", "dead"}) {
		t.Fatalf("before pausing: candidates %v", got)
	}
	paused, err := admin.Pause(ctx, "ops", "wrong tiers", "a", "dead", "later")
	if err != nil || len(paused) != 3 || paused[0].By != "ops" || paused[0].Reason != "wrong tiers" {
		t.Fatalf("Pause = %+v, %v", paused, err)
	}
	if again, err := admin.Pause(ctx, "someone", "again", "a"); err != nil || len(again) != 0 {
		t.Fatalf("pausing a paused partition again = %+v, %v; want nothing new", again, err)
	}
	if got := candidateKeys(t, s); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("a, its segment and dead paused: candidates %v, want [b]", got)
	}
	// A claim from a read made before the pause wins nothing paused.
	won, err := s.Claim(ctx, "w#1", time.Minute, []taskstore.Candidate{
		{Key: "a", Version: 0}, {Key: "a#00000000000000000000", Version: 0}, {Key: "dead", Version: 0, Owned: true}})
	if err != nil || len(won) != 0 {
		t.Fatalf("claiming paused rows won %v, %v", won, err)
	}
	// Work is accepted while paused, and a partition paused before its
	// first work is paused once it exists.
	if _, err := admin.AddWork(ctx, "a", 5); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AddWork(ctx, "later", 5); err != nil {
		t.Fatal(err)
	}
	if got := candidateKeys(t, s); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("after adding work: candidates %v, want [b]", got)
	}
	var available int64
	if err := db.QueryRowContext(ctx, `SELECT available FROM baton.tasks WHERE partition_key = 'a'`).Scan(&available); err != nil || available != 15 {
		t.Fatalf("a's available = %d, %v; want 15", available, err)
	}
	var aSince time.Time
	if err := db.QueryRowContext(ctx, `SELECT claimable_at FROM baton.tasks WHERE partition_key = 'a'`).Scan(&aSince); err != nil {
		t.Fatal(err)
	}
	// Drain the notifications so far (work added).
	listener.Drain(200 * time.Millisecond)

	// Kind pause: every partition of the kind, one created after it too;
	// other kinds are untouched.
	orders := partition.NewStore(pgtest.Handle(db), "").Kind("orders")
	if _, err := orders.AddWork(ctx, "o1", 3); err != nil {
		t.Fatal(err)
	}
	if _, err := orders.Pause(ctx, "ops", "month end"); err != nil {
		t.Fatal(err)
	}
	if _, err := orders.AddWork(ctx, "o2", 3); err != nil {
		t.Fatal(err)
	}
	so := s.Kind("orders")
	if got := candidateKeys(t, so); len(got) != 0 {
		t.Fatalf("orders paused: candidates %v, want none", got)
	}
	if got := candidateKeys(t, s); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("orders paused: default's candidates %v, want [b]", got)
	}
	list, err := orders.Paused(ctx)
	if err != nil || len(list) != 1 || list[0].Key != "" || list[0].Kind != "orders" || list[0].Reason != "month end" {
		t.Fatalf("orders' pauses = %+v, %v", list, err)
	}
	// Resuming a partition of a paused kind leaves it paused with its kind.
	if _, err := orders.Pause(ctx, "ops", "", "o1"); err != nil {
		t.Fatal(err)
	}
	if r, err := orders.Resume(ctx, "ops", "o1"); err != nil || len(r) != 1 {
		t.Fatalf("resuming o1 = %+v, %v", r, err)
	}
	if got := candidateKeys(t, so); len(got) != 0 {
		t.Fatalf("o1 resumed, orders paused: candidates %v, want none", got)
	}
	listener.Drain(200 * time.Millisecond)

	// Resume: announced with a time no later than a's place in line.
	resumed, err := admin.Resume(ctx, "ops", "a", "dead", "never-paused")
	if err != nil || len(resumed) != 2 {
		t.Fatalf("Resume = %+v, %v; want a and dead", resumed, err)
	}
	payload := listener.Next()
	if reason, kind := notify.Parse(payload); reason != notify.Resumed || kind != partition.DefaultKind {
		t.Fatalf("notification %q, want resumed of the default kind", payload)
	}
	since, ok := notify.Since(payload)
	if !ok || since.After(aSince) {
		t.Fatalf("notification %q: claimable since %v, a since %v", payload, since, aSince)
	}
	s.LowerFloor(since) // as a worker that hears it does
	if got := candidateKeys(t, s); !slices.Equal(got, []string{"a", "a#00000000000000000000", "b", "dead"}) {
		t.Fatalf("after resuming: candidates %v", got)
	}
	if _, err := orders.Resume(ctx, "ops"); err != nil {
		t.Fatal(err)
	}
	if got := candidateKeys(t, so); !slices.Equal(got, []string{"o1", "o2"}) {
		t.Fatalf("orders resumed: candidates %v, want [o1 o2]", got)
	}
	events, err := admin.History(ctx, "a", 10)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []partition.EventKind
	for _, e := range events {
		kinds = append(kinds, e.Kind)
	}
	if !slices.Contains(kinds, partition.EventPaused) || !slices.Contains(kinds, partition.EventResumed) {
		t.Fatalf("a's history %v lacks paused and resumed", kinds)
	}
}

// The heartbeat tells an owner which of its partitions are paused, whether
// it rewrote their leases or only checked them, and by the kind's pause
// too; the owner still holds them (it releases them itself).
func TestHeartbeatReportsPaused(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	h := pgtest.Handle(db)
	if _, err := db.ExecContext(ctx, `INSERT INTO baton.tasks (partition_key, available, position) VALUES ('a', 10, 0), ('b', 10, 0)`); err != nil {
		t.Fatal(err)
	}
	s := taskstore.NewStore(db, "")
	won, err := s.Claim(ctx, "w#1", time.Minute, []taskstore.Candidate{{Key: "a"}, {Key: "b"}})
	if err != nil || len(won) != 2 {
		t.Fatalf("claims %v, %v", won, err)
	}
	leases := []partition.Lease{won[0].Lease, won[1].Lease}
	beat := func(renewBelow time.Duration) map[string]bool {
		t.Helper()
		rs, err := s.HeartbeatBelow(ctx, taskstore.Worker{InstanceID: "w#1", Name: "w"}, time.Minute, renewBelow, leases)
		if err != nil || len(rs) != 2 {
			t.Fatalf("heartbeat = %v, %v", rs, err)
		}
		out := map[string]bool{}
		for _, r := range rs {
			out[r.Key] = r.Paused
		}
		return out
	}
	if got := beat(2 * time.Minute); got["a"] || got["b"] {
		t.Fatalf("nothing paused: %v", got)
	}
	admin := partition.NewStore(h, "")
	if _, err := admin.Pause(ctx, "ops", "", "a"); err != nil {
		t.Fatal(err)
	}
	for _, below := range []time.Duration{2 * time.Minute, 0} { // rewritten, checked
		if got := beat(below); !got["a"] || got["b"] {
			t.Fatalf("a paused (renew below %v): %v", below, got)
		}
	}
	if _, err := admin.Pause(ctx, "ops", ""); err != nil {
		t.Fatal(err)
	}
	if got := beat(2 * time.Minute); !got["a"] || !got["b"] {
		t.Fatalf("kind paused: %v", got)
	}
}
