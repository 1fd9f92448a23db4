package rerate_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing/rerate"
)

// segmentedPreview loads the golden records under tiers without
// discounts, prices them, and starts a preview of the golden tiers of
// every contract; it returns the database, the first pricing's export and
// its totals.
func segmentedPreview(t *testing.T) (*dbconn.DB, []byte, map[string]totals) {
	t.Helper()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{MaxOpenConns: 32})
	loadUndiscounted(t, db)
	runUntilDone(t, db, distributor.Config{BatchSize: 97})
	old, err := readTotals(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	first := exportBytes(t, db)
	previewAll(t, db, false)
	return db, first, old
}

// checkApproved checks the output once every preview of segmentedPreview
// is current: the golden export, the first pricing's as the previous
// generation, and each record priced once under generation 2.
func checkApproved(t *testing.T, db *dbconn.DB, first []byte) {
	t.Helper()
	sameBytes(t, "export after approval", exportBytes(t, db), golden(t))
	sameBytes(t, "previous generation after approval", previousBytes(t, db), first)
	verifyClean(t, db)
	if n := count(t, db.DB, `SELECT count(*) FROM baton.priced_rows WHERE generation = 2`); n != 3544 {
		t.Errorf("%d rows of generation 2, want 3544 (each record priced once)", n)
	}
}

// gatedWorkers runs n workers that split every preview into segments of
// one chunk, priced 5 records a batch (so a segment of more than 10
// records is still behind when its worker waits at the gate after its
// second batch). The first checkpoint of a segment's batch is signalled on
// first, and every segment's checkpoint from then on waits for open to
// be closed before its worker goes on; done is closed when all have
// finished. splits counts the splits.
func gatedWorkers(t *testing.T, db *dbconn.DB, n int, open <-chan struct{}) (first, done <-chan struct{}, splits *atomic.Int64) {
	t.Helper()
	splits = new(atomic.Int64)
	f, d := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for i := range n {
		cfg := distributor.Config{BatchSize: 5, SegmentRecords: 1}
		cfg.OnEvent = func(e distributor.Event) {
			switch {
			case e.Kind == distributor.EventSplit:
				splits.Add(1)
			case e.Kind == distributor.EventCheckpoint && isSegmentKey(e.Key):
				once.Do(func() { close(f) })
				<-open
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			runUntilDone(t, db, withName(cfg, fmt.Sprintf("w%d", i)))
		}()
	}
	go func() { wg.Wait(); close(d) }()
	return f, d, splits
}

// A preview over records the current generation has all priced is split
// into segments like a re-pricing, and three workers price its pieces at
// once: nothing switches while it waits, its rows are the golden output,
// Previews reports it caught up only once every piece is, and approving it
// makes it the export at once.
func TestPreviewInSegments(t *testing.T) {
	t.Parallel()
	db, first, _ := segmentedPreview(t)
	ctx := context.Background()
	open := make(chan struct{})
	close(open)
	_, done, splits := gatedWorkers(t, db, 3, open)
	testutil.Receive(t, done, 2*time.Minute, "the workers finishing the previews")
	if splits.Load() == 0 {
		t.Fatal("no preview was split")
	}
	if n := count(t, db.DB, `SELECT count(*) FROM baton.tasks WHERE segment_of IS NOT NULL AND generation = 2`); n == 0 {
		t.Fatal("no segment of generation 2")
	}
	if n := count(t, db.DB, `SELECT count(*) FROM baton.contracts WHERE current_generation <> 1`); n != 0 {
		t.Fatalf("%d contracts switched to their preview before approval", n)
	}
	sameBytes(t, "export while the previews wait", exportBytes(t, db), first)
	sameBytes(t, "the previews priced in segments", previewBytes(t, db), golden(t))
	previews, err := rerate.NewStore(db, "").Previews(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := goldenTotals(t)
	for _, p := range previews {
		if !p.CaughtUp || p.Priced != want[p.Contract].n || p.NetTotal != want[p.Contract].net {
			t.Errorf("preview %+v, want caught up with net %d over %d records", p, want[p.Contract].net, want[p.Contract].n)
		}
	}
	approved, err := rerate.NewStore(db, "").Approve(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range approved {
		if a.Pricing || a.Current != 2 {
			t.Errorf("approved %+v, want current at once", a)
		}
	}
	checkApproved(t, db, first)
}

// A preview approved while its segments are being priced goes on as a
// generation being priced, and each contract switches once its last
// piece has caught up, exactly to the golden output; a reader running
// through it all sees each contract's totals as one whole generation's.
// The approval's transaction is held open until a segment's last batch
// waits for the generation's row it holds, so that batch reads the
// approval's state after it and, if it is its contract's last piece,
// switches.
func TestPreviewInSegmentsApprovedWhilePriced(t *testing.T) {
	t.Parallel()
	db, first, old := segmentedPreview(t)
	ctx := context.Background()
	open := make(chan struct{})
	started, done, _ := gatedWorkers(t, db, 2, open)
	testutil.Receive(t, started, time.Minute, "a segment's first batch")
	stop := watchTotals(t, db, old, goldenTotals(t))
	// Its segments, not its partition (at the end of the records once
	// split), say how far a preview is priced.
	previews, err := rerate.NewStore(db, "").Previews(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	caughtUp := map[string]bool{}
	for _, p := range previews {
		if p.CaughtUp != (p.Priced == p.Records) || p.Priced > p.Records {
			t.Errorf("preview %+v: caught up %v with %d of %d records priced", p, p.CaughtUp, p.Priced, p.Records)
		}
		caughtUp[p.Contract] = p.CaughtUp
	}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var pid int
	if err := tx.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	approved, err := rerate.NewStore(db, "").ApproveTx(ctx, tx, nil)
	if err != nil {
		t.Fatal(err)
	}
	behind := 0
	for _, a := range approved {
		if a.Pricing {
			behind++
			if caughtUp[a.Contract] {
				// Caught up stays caught up: Previews was wrong.
				t.Errorf("preview of %s approved as still priced, after Previews listed it caught up", a.Contract)
			}
		}
	}
	if behind == 0 {
		t.Fatalf("approved %+v, want some previews still being priced", approved)
	}
	close(open)
	pgtest.WaitForLockWaitOn(t, db.DB, "state IN ('pricing', 'preview')", pid)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	testutil.Receive(t, done, 2*time.Minute, "the workers finishing the approved previews")
	reads := stop()

	if n := count(t, db.DB, `SELECT count(*) FROM baton.generations WHERE state IN ('pricing', 'preview')`); n != 0 {
		t.Fatalf("%d generations still being priced or previewed", n)
	}
	if n := count(t, db.DB, `SELECT count(*) FROM baton.contracts WHERE current_generation = 2`); n != 12 {
		t.Fatalf("%d contracts switched to generation 2, want 12", n)
	}
	checkApproved(t, db, first)
	t.Logf("%d of %d previews approved while still priced; %d reads through it", behind, len(approved), reads)
}

// A preview discarded while its segments are being priced leaves nothing
// of itself: the discard's rewind waits for the segments' batches in
// flight before the preview's rows are removed, so none outlives it, and
// the current generation is the first pricing's, as it was.
func TestPreviewInSegmentsDiscardedWhilePriced(t *testing.T) {
	t.Parallel()
	db, first, _ := segmentedPreview(t)
	ctx := context.Background()
	open := make(chan struct{})
	started, done, _ := gatedWorkers(t, db, 2, open)
	testutil.Receive(t, started, time.Minute, "a segment's first batch")
	discarded := make(chan error, 1)
	go func() {
		_, err := rerate.NewStore(db, "").Discard(ctx, nil)
		discarded <- err
	}()
	close(open)
	if err := testutil.Receive(t, discarded, time.Minute, "the discard"); err != nil {
		t.Fatal(err)
	}
	testutil.Receive(t, done, 2*time.Minute, "the workers finishing")

	if n := count(t, db.DB, `SELECT count(*) FROM baton.priced_rows WHERE generation = 2`); n != 0 {
		t.Errorf("%d rows of the discarded previews outlived them", n)
	}
	if n := count(t, db.DB, `SELECT count(*) FROM baton.generations WHERE state = 'preview'`); n != 0 {
		t.Errorf("%d previews left", n)
	}
	if n := count(t, db.DB, `SELECT count(*) FROM baton.contracts WHERE current_generation <> 1`); n != 0 {
		t.Errorf("%d contracts moved off their first generation", n)
	}
	sameBytes(t, "export after the discard", exportBytes(t, db), first)
	verifyClean(t, db)
}

func isSegmentKey(key string) bool {
	_, _, ok := partition.ParseSegmentKey(key)
	return ok
}
