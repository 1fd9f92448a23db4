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
	"github.com/batonhq/baton/pricing"
	"github.com/batonhq/baton/pricing/ingest"
	"github.com/batonhq/baton/pricing/pricer"
	"github.com/batonhq/baton/pricing/rerate"
)

// runWorkers runs n distributors with cfg (each its own name) until
// nothing is left, and returns how many splits they committed of
// partitions at generation gen or past it.
func runWorkers(t *testing.T, db *dbconn.DB, n int, cfg distributor.Config) int64 {
	t.Helper()
	var splits atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		c := cfg
		c.OnEvent = func(e distributor.Event) {
			if e.Kind == distributor.EventSplit {
				splits.Add(1)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			runUntilDone(t, db, withName(c, fmt.Sprintf("w%d", i)))
		}()
	}
	wg.Wait()
	return splits.Load()
}

func withName(cfg distributor.Config, name string) distributor.Config {
	cfg.Name = name
	return cfg
}

// A re-pricing is split into segments like a first pricing, and three
// workers price the pieces at once, so pieces of one contract catch up
// in batches that run together, alone or in groups: each contract
// switches once, when its last piece has caught up, to exactly the golden
// output, and a reader running through it all sees each contract's
// totals as one whole generation's, never a mix.
func TestRepricingInSegmentsSwitchesOnceAllCaughtUp(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{MaxOpenConns: 32})
	ctx := context.Background()
	loadUndiscounted(t, db)
	runUntilDone(t, db, distributor.Config{BatchSize: 97})
	first := exportBytes(t, db)
	old, err := readTotals(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	var reqs []rerate.Request
	for c, tiers := range vectorTiers(t) {
		reqs = append(reqs, rerate.Request{Contract: c, NewTiers: tiers, Reason: "tiers corrected", StartedBy: "test"})
	}
	if _, err := start(t, db, reqs); err != nil {
		t.Fatal(err)
	}

	stop := watchTotals(t, db, old, goldenTotals(t))
	splits := runWorkers(t, db, 3, distributor.Config{BatchSize: 50, SegmentRecords: 1})
	reads := stop()
	if splits == 0 {
		t.Fatal("no re-pricing was split")
	}
	segments := count(t, db.DB, `SELECT count(*) FROM baton.tasks WHERE segment_of IS NOT NULL AND generation = 2`)
	if segments == 0 {
		t.Fatal("no segment of generation 2")
	}
	if n := count(t, db.DB, `SELECT count(*) FROM baton.generations WHERE generation = 2 AND state = 'current'`); n != 12 {
		t.Fatalf("%d contracts switched to generation 2, want 12", n)
	}
	sameBytes(t, "export after re-pricing in segments", exportBytes(t, db), golden(t))
	verifyClean(t, db)
	sameBytes(t, "previous generation", previousBytes(t, db), first)
	if n := count(t, db.DB, `SELECT count(*) FROM baton.priced_rows WHERE generation = 2`); n != 3544 {
		t.Errorf("%d rows of generation 2, want 3544 (each record priced once)", n)
	}
	t.Logf("%d splits, %d segments of generation 2, %d reads through the re-pricing", splits, segments, reads)
}

// A re-pricing that starts while the generation before it is being priced
// in segments abandons it whole: the segments' batches in flight end
// before it is abandoned (its rewind waits for them), so none of the
// abandoned generation's rows outlives it, and the new one prices to the
// golden output.
func TestRepricingAbandonsAGenerationPricedInSegments(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{MaxOpenConns: 32})
	loadUndiscounted(t, db)
	runUntilDone(t, db, distributor.Config{BatchSize: 97})
	tiers := vectorTiers(t)
	var reqs []rerate.Request
	for c := range tiers {
		reqs = append(reqs, rerate.Request{Contract: c, Reason: "first correction", StartedBy: "test"})
	}
	if _, err := start(t, db, reqs); err != nil {
		t.Fatal(err)
	}

	// Workers price generation 2 in segments; once some of its segments
	// have committed batches, generation 3 replaces it while they run.
	cfg := distributor.Config{BatchSize: 20, SegmentRecords: 1}
	segmentBatch := make(chan struct{}, 1)
	cfg.OnEvent = func(e distributor.Event) {
		if e.Kind == distributor.EventCheckpoint && len(e.Key) > 20 {
			select {
			case segmentBatch <- struct{}{}:
			default:
			}
		}
	}
	workers := make(chan struct{})
	go func() {
		defer close(workers)
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				runUntilDone(t, db, withName(cfg, fmt.Sprintf("g2-%d", i)))
			}()
		}
		wg.Wait()
	}()
	<-segmentBatch
	reqs = reqs[:0]
	for c, ts := range tiers {
		reqs = append(reqs, rerate.Request{Contract: c, NewTiers: ts, Reason: "second correction", StartedBy: "test"})
	}
	started, err := start(t, db, reqs)
	if err != nil {
		t.Fatal(err)
	}
	abandoned := 0
	for _, s := range started {
		if s.Abandoned == 2 {
			abandoned++
		}
	}
	if abandoned == 0 {
		t.Fatalf("no generation 2 was abandoned: %+v", started)
	}
	<-workers
	runWorkers(t, db, 2, distributor.Config{BatchSize: 50, SegmentRecords: 1})
	if n := count(t, db.DB, `SELECT count(*) FROM baton.priced_rows p JOIN baton.generations g
		ON g.contract_id = p.contract_id AND g.generation = p.generation WHERE g.state = 'abandoned'`); n != 0 {
		t.Errorf("%d rows of abandoned generations outlived them", n)
	}
	if n := count(t, db.DB, `SELECT count(*) FROM baton.generations WHERE state = 'pricing'`); n != 0 {
		t.Errorf("%d generations still being priced", n)
	}
	sameBytes(t, "export after the second re-pricing", exportBytes(t, db), golden(t))
	verifyClean(t, db)
	t.Logf("%d of 12 contracts' generation 2 abandoned while priced in segments", abandoned)
}

// A contract of 30,000 records re-priced in segments by three workers,
// with 5,000 more loaded after the split (the contract's partition prices
// them while its segments price the rest, so either may catch up last),
// prices exactly what a re-pricing in one piece does, record for record
// (the same tiers again, by one worker without segments: the previous
// generation's export equals the current one's), and a reader sees its
// totals only as the first generation's or the final one's.
func TestRepricingInSegmentsEqualsOnePiece(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{MaxOpenConns: 32})
	ctx := context.Background()
	const first, later = 30_000, 5_000
	load := func(from, to int, opts ingest.Options) {
		t.Helper()
		records := []string{"contract_id,record_id,amount_minor"}
		for i := from; i < to; i++ {
			records = append(records, fmt.Sprintf("big,big-r%05d,%d", i, 1+i*7919%100_000))
		}
		opts.RecordsPath = writeFile(t, "records.csv", records)
		if _, err := ingest.NewStore(db, "").Load(ctx, opts); err != nil {
			t.Fatal(err)
		}
	}
	tiers := writeFile(t, "tiers.csv", []string{"contract_id,threshold_minor,discount_bp", "big,0,0", "big,100000000,250"})
	load(0, first, ingest.Options{TiersPath: tiers})
	runUntilDone(t, db, distributor.Config{BatchSize: 4096})
	old, err := readTotals(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	newTiers := []pricing.Tier{{ThresholdMinor: 0, DiscountBP: 0}, {ThresholdMinor: 50_000_000, DiscountBP: 125},
		{ThresholdMinor: 400_000_000, DiscountBP: 333}, {ThresholdMinor: 1_000_000_000, DiscountBP: 777}}
	if _, err := start(t, db, []rerate.Request{{Contract: "big", NewTiers: newTiers, Reason: "new tiers", StartedBy: "test"}}); err != nil {
		t.Fatal(err)
	}

	// Every distinct totals a reader sees while the workers run, and once
	// after.
	seen := map[totals]int{}
	quit, done := make(chan struct{}), make(chan error)
	go func() {
		for last := false; ; {
			select {
			case <-quit:
				last = true
			default:
			}
			got, err := readTotals(ctx, db)
			if err != nil {
				done <- err
				return
			}
			seen[got["big"]]++
			if last {
				done <- nil
				return
			}
		}
	}()
	// A worker that stops once it has split the contract; the records
	// loaded then are its partition's to price, past its segments.
	cfg := distributor.Config{BatchSize: 512, SegmentRecords: 2048}
	splitCtx, split := context.WithCancel(ctx)
	one := cfg
	one.Logger, one.UntilDone = testLogger(), true // it ends by itself if it never splits
	one.Heartbeat, one.StaleAfter = 100*time.Millisecond, time.Second
	one.OnEvent = func(e distributor.Event) {
		if e.Kind == distributor.EventSplit {
			split()
		}
	}
	d, err := distributor.New(db, pricer.NewStore(db, "").Processor(), withName(one, "splitter"))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Run(splitCtx); err != nil {
		t.Fatal(err)
	}
	if splitCtx.Err() == nil {
		t.Fatal("the worker stopped without splitting the re-pricing")
	}
	load(first, first+later, ingest.Options{})
	runWorkers(t, db, 3, cfg)
	close(quit)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := count(t, db.DB, `SELECT count(*) FROM baton.tasks WHERE segment_of = 'big' AND generation = 2`); n < 2 {
		t.Fatalf("%d segments of generation 2, want the re-pricing split", n)
	}
	if n := count(t, db.DB, `SELECT count(*) FROM baton.generations WHERE contract_id = 'big' AND generation = 2 AND state = 'current'`); n != 1 {
		t.Fatal("generation 2 is not current")
	}
	final, err := readTotals(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	for x, reads := range seen {
		if x != old["big"] && x != final["big"] {
			t.Errorf("%d reads saw totals %+v: neither generation 1's %+v nor generation 2's %+v", reads, x, old["big"], final["big"])
		}
	}
	if final["big"] == old["big"] {
		t.Fatalf("the new tiers changed nothing: %+v", final["big"])
	}
	verifyRecords(t, db, first+later)
	inSegments := exportBytes(t, db)

	if _, err := start(t, db, []rerate.Request{{Contract: "big", Reason: "once more, in one piece", StartedBy: "test"}}); err != nil {
		t.Fatal(err)
	}
	if splits := runWorkers(t, db, 1, distributor.Config{BatchSize: 4096}); splits != 0 {
		t.Fatalf("the re-pricing in one piece was split %d times", splits)
	}
	sameBytes(t, "generation 2 (in segments) against generation 3 (in one piece)", previousBytes(t, db), exportBytes(t, db))
	sameBytes(t, "generation 2's export", inSegments, previousBytes(t, db))
	if n := count(t, db.DB, `SELECT count(*) FROM baton.priced_rows WHERE generation = 2`); n != first+later {
		t.Errorf("%d rows of generation 2, want %d", n, first+later)
	}
	t.Logf("a reader saw %d distinct totals", len(seen))
}
