package backlog_test

import (
	"context"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/backlog"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/partition"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func exec(t *testing.T, db bun.IDB, q string, args ...any) {
	t.Helper()
	if _, err := db.ExecContext(context.Background(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func dbNow(t *testing.T, db bun.IDB) time.Time {
	t.Helper()
	var now time.Time
	if err := db.QueryRowContext(context.Background(), `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

// newReader is a reader with cfg over a fresh database, and the clock it
// reads (Config.Now), set to the database's now.
func newReader(t *testing.T, cfg backlog.Config) (*bun.DB, *backlog.Reader, *time.Time) {
	t.Helper()
	db := pgtest.NewDB(t)
	clock := dbNow(t, db)
	cfg.Now = func() time.Time { return clock }
	r, err := backlog.New(pgtest.Handle(db), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return db, r, &clock
}

func one(t *testing.T, figs []backlog.Figures, kind string) backlog.Figures {
	t.Helper()
	for _, f := range figs {
		if f.Kind == kind {
			return f
		}
	}
	t.Fatalf("no figures for kind %q in %+v", kind, figs)
	return backlog.Figures{}
}

// The counts are exact against the task rows: segments count their own
// items once and their partition once, quarantined rows are apart, and
// lag is measured from the earliest pending_since of a pending row.
func TestFiguresCountTheTaskRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	// a: caught up. b: 30 pending. c: split; its own row moved to 100,
	// segments (0,50] at 20 and (50,100] at 50; plus 10 new items. q:
	// quarantined with 7 pending. Another kind has 5.
	exec(t, db, `INSERT INTO baton.tasks (kind, partition_key, available, position) VALUES
		('k', 'a', 10, 10), ('k', 'b', 30, 0), ('k', 'c', 110, 100), ('other', 'x', 5, 0)`)
	exec(t, db, `INSERT INTO baton.tasks (kind, partition_key, segment_of, available, position) VALUES
		('k', ?, 'c', 50, 20), ('k', ?, 'c', 100, 50)`, partition.SegmentKey("c", 0), partition.SegmentKey("c", 50))
	exec(t, db, `INSERT INTO baton.tasks (kind, partition_key, available, position, failed_at, lease_expires_at)
		VALUES ('k', 'q', 7, 0, now(), 'infinity')`)
	now := dbNow(t, db)
	exec(t, db, `UPDATE baton.tasks SET pending_since = ? WHERE partition_key = 'b'`, now.Add(-90*time.Second))
	exec(t, db, `UPDATE baton.tasks SET pending_since = ? WHERE partition_key = 'q'`, now.Add(-time.Hour))

	r, err := backlog.New(pgtest.Handle(db), backlog.Config{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	figs, err := r.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	k := one(t, figs, "k")
	if k.PendingItems != 30+10+30+50 || k.PendingPartitions != 2 || k.QuarantinedItems != 7 || k.QuarantinedPartitions != 1 {
		t.Errorf("pending %d items of %d partitions, quarantined %d of %d; want 120 of 2, 7 of 1",
			k.PendingItems, k.PendingPartitions, k.QuarantinedItems, k.QuarantinedPartitions)
	}
	if k.Lag != 90*time.Second {
		t.Errorf("lag %s, want 1m30s (b's; q is quarantined)", k.Lag)
	}
	if k.RateKnown || k.Drains || k.WorkersNeeded != 1 {
		t.Errorf("without samples: rate known %v, drains %v, workers needed %d; want false, false, 1", k.RateKnown, k.Drains, k.WorkersNeeded)
	}
	if o := one(t, figs, "other"); o.PendingItems != 5 || o.PendingPartitions != 1 {
		t.Errorf("other kind: %+v", o)
	}
}

// pending_since is the time a row last went from caught up to pending,
// through any writer, and a segment inherits its partition's.
func TestPendingSinceMarksTheStartOfABacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	s := partition.NewStore(pgtest.Handle(db), "").Kind("k")
	since := func(key string) time.Time {
		t.Helper()
		var at time.Time
		if err := db.QueryRowContext(ctx, `SELECT pending_since FROM baton.tasks WHERE kind = 'k' AND partition_key = ?`, key).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	if _, err := s.AddWork(ctx, "p", 5); err != nil {
		t.Fatal(err)
	}
	first := since("p")
	exec(t, db, `UPDATE baton.tasks SET pending_since = pending_since - interval '1 hour' WHERE partition_key = 'p'`)
	if _, err := s.AddWork(ctx, "p", 5); err != nil {
		t.Fatal(err)
	}
	if got := since("p"); !got.Equal(first.Add(-time.Hour)) {
		t.Errorf("adding to a pending row moved pending_since from %s to %s", first.Add(-time.Hour), got)
	}
	exec(t, db, `UPDATE baton.tasks SET position = available WHERE partition_key = 'p'`)
	if _, err := s.AddWork(ctx, "p", 1); err != nil {
		t.Fatal(err)
	}
	if got := since("p"); !got.After(first) {
		t.Errorf("a caught-up row that got work kept pending_since %s (first %s)", got, first)
	}
	exec(t, db, `INSERT INTO baton.tasks (kind, partition_key, segment_of, available, position) VALUES ('k', 'p#1', 'p', 11, 5)`)
	if got := since("p#1"); !got.Equal(since("p")) {
		t.Errorf("segment pending_since %s, partition's %s", got, since("p"))
	}
}

// The rate is the items processed since the sample nearest to a window
// ago: adds, splits and quarantines are not processing, rewinds are not
// negative processing; workers needed follows from it.
func TestRateCountsProcessedItemsOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, r, clock := newReader(t, backlog.Config{DrainTarget: 10 * time.Second})
	now := *clock
	exec(t, db, `INSERT INTO baton.tasks (kind, partition_key, available, position) VALUES ('k', 'a', 100, 0), ('k', 'b', 50, 0)`)
	exec(t, db, `INSERT INTO baton.workers (instance_id, name, kind, expires_at) VALUES ('w#1', 'w', 'k', ? ), ('w#2', 'w', 'k', ?)`,
		now.Add(time.Hour), now.Add(time.Hour))
	if _, err := r.Sample(ctx); err != nil {
		t.Fatal(err)
	}
	// 60 s later: a processed 40 and was split (its row moved to 100,
	// segment (40,100] processed 10 of it); b got 20 more items,
	// processed 30, then was rewound to 10 under a new generation; a
	// third row is quarantined with 9 pending.
	*clock = now.Add(time.Minute)
	exec(t, db, `UPDATE baton.tasks SET position = 100 WHERE partition_key = 'a'`)
	exec(t, db, `INSERT INTO baton.tasks (kind, partition_key, segment_of, available, position) VALUES ('k', ?, 'a', 100, 50)`,
		partition.SegmentKey("a", 40))
	exec(t, db, `UPDATE baton.tasks SET available = 70, position = 30 WHERE partition_key = 'b'`)
	exec(t, db, `UPDATE baton.tasks SET position = 10, generation = generation + 1 WHERE partition_key = 'b'`)
	exec(t, db, `INSERT INTO baton.tasks (kind, partition_key, available, position, failed_at, lease_expires_at) VALUES ('k', 'q', 9, 0, now(), 'infinity')`)
	figs, err := r.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	k := one(t, figs, "k")
	// processed: a 40 + 10 (segment) + b 30 = 80 items in 60 s.
	if !k.RateKnown || k.RateWindow != time.Minute || k.Rate != 80.0/60 {
		t.Fatalf("rate %v over %s (known %v), want 80 items a minute", k.Rate, k.RateWindow, k.RateKnown)
	}
	// pending: segment 50 + b 60 = 110; per worker 2/3 item/s; 10 s target.
	if k.PendingItems != 110 || k.PerWorkerRate != 80.0/60/2 || k.WorkersNeeded != 17 {
		t.Errorf("pending %d, per-worker rate %v, workers needed %d; want 110, 0.667, 17", k.PendingItems, k.PerWorkerRate, k.WorkersNeeded)
	}
	if want := time.Duration(110 / (80.0 / 60) * float64(time.Second)); !k.Drains || k.DrainTime != want {
		t.Errorf("drain time %s (drains %v), want %s", k.DrainTime, k.Drains, want)
	}
	// 60 items on one row take 90 s at one worker's pace, but everything
	// drains in 82.5 s; on two rows 45 s.
	if eta, ok := k.ETA(60, 1); !ok || eta != k.DrainTime {
		t.Errorf("ETA of 60 items on one row: %s, %v; want the drain time %s", eta, ok, k.DrainTime)
	}
	if eta, ok := k.ETA(60, 2); !ok || eta != 45*time.Second {
		t.Errorf("ETA of 60 items on two rows: %s, %v; want 45s", eta, ok)
	}
}

// A recording read stores one sample per kind per interval, whoever
// reads; a plain read stores none.
func TestSamplesAreWrittenOncePerInterval(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, r, clock := newReader(t, backlog.Config{})
	now := *clock
	exec(t, db, `INSERT INTO baton.tasks (kind, partition_key, available, position) VALUES ('k', 'a', 100, 0)`)
	count := func() int {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM baton.backlog_samples`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for i, step := range []struct {
		after  time.Duration
		record bool
		want   int
	}{{0, false, 0}, {0, true, 1}, {5 * time.Second, true, 1}, {16 * time.Second, true, 2}, {3 * time.Hour, true, 1}} {
		*clock = now.Add(step.after)
		read := r.Read
		if step.record {
			read = r.Sample
		}
		if _, err := read(ctx); err != nil {
			t.Fatal(err)
		}
		if got := count(); got != step.want {
			t.Errorf("step %d: %d samples, want %d", i, got, step.want)
		}
	}
	pts, err := r.History(ctx, "k", time.Hour)
	if err != nil || len(pts) != 1 || pts[0].PendingItems != 100 {
		t.Errorf("history %+v, %v", pts, err)
	}
}

// A recording read within the sampling interval of another's publishes
// that sample's figures instead of reading the task table again.
func TestAFreshSampleIsPublishedAsItIs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, r, clock := newReader(t, backlog.Config{})
	now := *clock
	exec(t, db, `INSERT INTO baton.tasks (kind, partition_key, available, position) VALUES ('k', 'a', 100, 0)`)
	if _, err := r.Sample(ctx); err != nil {
		t.Fatal(err)
	}
	exec(t, db, `UPDATE baton.tasks SET position = 60 WHERE partition_key = 'a'`)
	*clock = now.Add(5 * time.Second)
	figs, err := r.Sample(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if k := one(t, figs, "k"); k.PendingItems != 100 || !k.At.Equal(now) {
		t.Errorf("within the interval: %d pending at %s, want the sample's 100 at %s", k.PendingItems, k.At, now)
	}
	if figs, err = r.Read(ctx); err != nil {
		t.Fatal(err)
	}
	if k := one(t, figs, "k"); k.PendingItems != 40 {
		t.Errorf("a plain read: %d pending, want 40 (it always reads the table)", k.PendingItems)
	}
	*clock = now.Add(16 * time.Second)
	if figs, err = r.Sample(ctx); err != nil {
		t.Fatal(err)
	}
	if k := one(t, figs, "k"); k.PendingItems != 40 || !k.RateKnown || k.Rate != 60.0/16 {
		t.Errorf("past the interval: %d pending, rate %v (known %v); want 40 and 60 items in 16 s", k.PendingItems, k.Rate, k.RateKnown)
	}
}

// A rewind through the producers' own statement (partition.Store.Rewind)
// puts records back without counting as negative processing, and starts
// the lag of a caught-up partition at the rewind.
func TestARewindIsNotNegativeProcessing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, r, clock := newReader(t, backlog.Config{})
	now := *clock
	exec(t, db, `INSERT INTO baton.tasks (kind, partition_key, available, position) VALUES ('k', 'a', 100, 100), ('k', 'b', 50, 0)`)
	if _, err := r.Sample(ctx); err != nil {
		t.Fatal(err)
	}
	// b prices 20 of its records; a is rewound to 40 (60 records again).
	exec(t, db, `UPDATE baton.tasks SET position = 20 WHERE partition_key = 'b'`)
	exec(t, db, `UPDATE baton.tasks SET pending_since = ? WHERE partition_key = 'b'`, now.Add(-time.Hour))
	if _, err := partition.NewStore(pgtest.Handle(db), "").Kind("k").Rewind(ctx, []partition.Rewind{{Key: "a", Position: 40}}); err != nil {
		t.Fatal(err)
	}
	*clock = now.Add(20 * time.Second)
	figs, err := r.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	k := one(t, figs, "k")
	if k.PendingItems != 60+30 || !k.RateKnown || k.Rate != 1 {
		t.Errorf("after the rewind: %d pending, rate %v (known %v); want 90 and 20 records in 20 s", k.PendingItems, k.Rate, k.RateKnown)
	}
	var since time.Time
	if err := db.QueryRowContext(ctx, `SELECT pending_since FROM baton.tasks WHERE partition_key = 'a'`).Scan(&since); err != nil {
		t.Fatal(err)
	}
	if since.Before(now) {
		t.Errorf("the rewound partition's backlog began at %s, before the rewind (%s)", since, now)
	}
}
