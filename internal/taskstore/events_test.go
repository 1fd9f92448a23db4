package taskstore_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
)

// Every ownership change writes its event in its own statement: a claim,
// a takeover (with the old owner and its last heartbeat), the first batch
// (with the takeover time), a release with its reason, failures, the
// quarantine and a retry. A fenced statement writes nothing.
func TestHistoryIsWrittenByTheProtocolStatements(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `INSERT INTO baton.tasks (partition_key, available) VALUES ('k', 10)`); err != nil {
		t.Fatal(err)
	}
	s := taskstore.NewStore(db, "")
	claim := func(owner string, c taskstore.Candidate) taskstore.Claimed {
		t.Helper()
		won, err := s.Claim(ctx, owner, time.Minute, []taskstore.Candidate{c})
		if err != nil || len(won) != 1 {
			t.Fatalf("claim by %s: %v %v", owner, won, err)
		}
		return won[0]
	}
	a := claim("a#1", taskstore.Candidate{Key: "k", Version: 0})
	if _, err := s.Release(ctx, "a#1", []partition.Lease{a.Lease}); err != nil {
		t.Fatal(err)
	}
	b := claim("b#1", taskstore.Candidate{Key: "k", Version: 2})
	// b dies: its lease expires five seconds after its last heartbeat.
	if _, err := db.ExecContext(ctx, `UPDATE baton.tasks SET heartbeat_at = now() - interval '5 seconds',
		lease_expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	c := claim("c#1", taskstore.Candidate{Key: "k", Version: b.Version, Owned: true})
	if !c.Takeover || c.PrevHeartbeat.IsZero() {
		t.Fatalf("takeover claim %+v: want Takeover and the old owner's heartbeat", c)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Fence(ctx, tx, "c#1", c.Lease); err != nil {
		t.Fatal(err)
	}
	if err := s.Advance(ctx, tx, c.Lease, 0, 4, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordFirstBatch(ctx, tx, "c#1", c.Lease, 4, 4, c.PrevHeartbeat); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	// The old owner's release is fenced: no event.
	if rel, err := s.ReleaseFor(ctx, "b#1", "shutdown", []partition.Lease{b.Lease}); err != nil || len(rel) != 0 {
		t.Fatalf("stale release: %v %v", rel, err)
	}
	if _, err := s.Fail(ctx, "c#1", c.Lease, "bad row", time.Millisecond, time.Millisecond, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `UPDATE baton.tasks SET lease_expires_at = '-infinity'`); err != nil {
		t.Fatal(err)
	}
	d := claim("d#1", taskstore.Candidate{Key: "k", Version: c.Version + 1})
	if r, err := s.Fail(ctx, "d#1", d.Lease, "bad row again", time.Millisecond, time.Millisecond, 2); err != nil || !r.Quarantined {
		t.Fatalf("second failure: %+v %v; want quarantined", r, err)
	}
	if ok, err := s.Admin().RetryBy(ctx, "k", "console"); err != nil || !ok {
		t.Fatalf("retry: %v %v", ok, err)
	}
	if err := s.Record(ctx, "b#1", partition.EventFenced, b.Lease, "fenced"); err != nil {
		t.Fatal(err)
	}

	h, err := s.Admin().History(ctx, "k", 100)
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(h)
	var kinds []string
	for _, e := range h {
		kinds = append(kinds, string(e.Kind)+"@"+e.Worker)
		if !e.Kind.Recorded() {
			t.Errorf("kind %q is in the table but not Recorded", e.Kind)
		}
	}
	want := []string{"claimed@a#1", "released@a#1", "claimed@b#1", "takeover@c#1", "first_batch@c#1",
		"failed@c#1", "claimed@d#1", "quarantined@d#1", "retried@", "fenced@b#1"}
	if !slices.Equal(kinds, want) {
		t.Fatalf("history %v\nwant    %v", kinds, want)
	}
	if h[1].Version != a.Version || h[3].Version != c.Version || h[7].Version != d.Version {
		t.Fatalf("event versions %d %d %d; want the claims' %d %d %d", h[1].Version, h[3].Version, h[7].Version,
			a.Version, c.Version, d.Version)
	}
	if h[3].PrevOwner != "b#1" || h[3].PrevBeatAt == nil {
		t.Fatalf("takeover event %+v: want previous owner b#1 and its heartbeat", h[3])
	}
	if tt := h[4].TakeoverTime; tt == nil || *tt < 5*time.Second || *tt > time.Minute {
		t.Fatalf("first batch takeover time %v; want the 5s since b's last heartbeat plus a little", tt)
	}
	if *h[4].Position != 4 || *h[4].Items != 4 {
		t.Fatalf("first batch %+v: want position 4, 4 items", h[4])
	}
	if h[5].Detail != "bad row" || *h[5].Attempts != 1 || h[7].Detail != "bad row again" || *h[7].Attempts != 2 {
		t.Fatalf("failure events %+v %+v", h[5], h[7])
	}
	if h[8].Detail != "console" {
		t.Fatalf("retry event %+v: want actor console", h[8])
	}
	st, err := s.Admin().Takeovers(ctx, time.Hour)
	if err != nil || st.Count != 1 || st.P50 != *h[4].TakeoverTime {
		t.Fatalf("takeover stats %+v %v; want one of %v", st, err, *h[4].TakeoverTime)
	}

	// A store without events writes none.
	quiet := s.WithoutEvents()
	v, _, err := s.Admin().Progress(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	won, err := quiet.Claim(ctx, "e#1", time.Minute, []taskstore.Candidate{{Key: "k", Version: v}})
	if err != nil || len(won) != 1 {
		t.Fatalf("quiet claim: %v %v", won, err)
	}
	if rel, err := quiet.ReleaseFor(ctx, "e#1", "caught_up", []partition.Lease{won[0].Lease}); err != nil || len(rel) != 1 {
		t.Fatalf("quiet release: %v %v", rel, err)
	}
	if after, err := s.Admin().History(ctx, "k", 100); err != nil || len(after) != len(h) {
		t.Fatalf("history has %d events after a store without events claimed and released; want %d (%v)", len(after), len(h), err)
	}

	// Pruning by count keeps the newest.
	if n, err := s.PruneEvents(ctx, time.Hour, 3); err != nil || n != int64(len(h)-3) {
		t.Fatalf("pruned %d (%v); want %d", n, err, len(h)-3)
	}
	if after, err := s.Admin().History(ctx, "k", 100); err != nil || len(after) != 3 || after[0].Kind != partition.EventFenced {
		t.Fatalf("after pruning: %+v %v", after, err)
	}
	// And by age.
	if _, err := db.ExecContext(ctx, `UPDATE baton.events SET at = at - interval '2 hours'`); err != nil {
		t.Fatal(err)
	}
	if n, err := s.PruneEvents(ctx, time.Hour, 1000); err != nil || n != 3 {
		t.Fatalf("pruned %d (%v); want the 3 older than an hour", n, err)
	}
}

// The runtime-only kinds are never recorded, and the names of the kinds
// stored in the table are the stable ones.
func TestEventKindNames(t *testing.T) {
	for k, name := range map[partition.EventKind]string{
		partition.EventClaimed: "claimed", partition.EventTakeover: "takeover", partition.EventFirstBatch: "first_batch",
		partition.EventReleased: "released", partition.EventFenced: "fenced", partition.EventLost: "lost",
		partition.EventFailed: "failed", partition.EventQuarantined: "quarantined", partition.EventRetried: "retried",
	} {
		if string(k) != name || !k.Recorded() {
			t.Errorf("%q: want the recorded kind %q", k, name)
		}
	}
	for _, k := range []partition.EventKind{partition.EventClaimLost, partition.EventConfirmed,
		partition.EventCheckpoint, partition.EventClaimRoundFailed, "unknown"} {
		if k.Recorded() {
			t.Errorf("%q is Recorded", k)
		}
	}
}
