package pricer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/pricing/export"
	"github.com/batonhq/baton/pricing/ingest"
	"github.com/batonhq/baton/pricing/pricer"
	"github.com/batonhq/baton/pricing/pricingschema"
)

// The tests leave no goroutine behind (the server is torn down first).
func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.WithServer(m, pricingschema.Set)) }

const vectors = "../../testdata/vectors/"

func loadVectors(t *testing.T, db *dbconn.DB) {
	t.Helper()
	if _, err := ingest.NewStore(db, "").Load(context.Background(), ingest.Options{
		TiersPath: vectors + "tiers.csv", RecordsPath: vectors + "records.csv",
	}); err != nil {
		t.Fatal(err)
	}
}

func runUntilDone(t *testing.T, db *dbconn.DB, cfg distributor.Config) {
	t.Helper()
	runUntilDoneCtx(t, context.Background(), db, cfg)
}

// runUntilDoneCtx is runUntilDone stopping early when ctx is cancelled.
func runUntilDoneCtx(t *testing.T, ctx context.Context, db *dbconn.DB, cfg distributor.Config) {
	t.Helper()
	cfg.UntilDone = true
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	d, err := distributor.New(db, pricer.NewStore(db, "").Processor(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := d.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

func exportBytes(t *testing.T, db *dbconn.DB) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := export.NewStore(db, "").Write(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func assertGolden(t *testing.T, got []byte) {
	t.Helper()
	want, err := os.ReadFile(vectors + "expected.csv")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := bytes.Split(got, []byte("\n")), bytes.Split(want, []byte("\n"))
		for i := 0; i < min(len(gl), len(wl)); i++ {
			if !bytes.Equal(gl[i], wl[i]) {
				t.Fatalf("export differs from expected.csv at line %d:\n got  %s\n want %s", i+1, gl[i], wl[i])
			}
		}
		t.Fatalf("export has %d lines, expected.csv %d", len(gl), len(wl))
	}
}

func verifyClean(t *testing.T, db *dbconn.DB) pricer.Summary {
	t.Helper()
	s, err := pricer.NewStore(db, "").Verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range s.Mismatches {
		t.Errorf("verification: %s", m.Description)
	}
	return s
}

func TestGoldenVectorsEndToEnd(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	loadVectors(t, db)
	runUntilDone(t, db, distributor.Config{Name: "golden", Heartbeat: 100 * time.Millisecond, StaleAfter: time.Second})
	assertGolden(t, exportBytes(t, db))
	s := verifyClean(t, db)
	if s.Records != 3544 || s.Priced != 3544 {
		t.Fatalf("verified %d records, %d priced; want 3544", s.Records, s.Priced)
	}
}

// Split into segments as small as one chunk, priced by three workers at
// once, the golden vectors export byte for byte as priced whole.
func TestGoldenVectorsBySegments(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{MaxOpenConns: 32})
	loadVectors(t, db)
	var splits atomic.Int64
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runUntilDone(t, db, distributor.Config{Name: fmt.Sprintf("seg-%d", i), Heartbeat: 100 * time.Millisecond,
				StaleAfter: time.Second, BatchSize: 100, SegmentRecords: 1,
				OnEvent: func(e distributor.Event) {
					if e.Kind == distributor.EventSplit {
						splits.Add(1)
					}
				}})
		}()
	}
	wg.Wait()
	if splits.Load() == 0 {
		t.Fatal("no contract was split")
	}
	var segments int
	if err := db.QueryRow(`SELECT count(*) FROM baton.tasks WHERE segment_of IS NOT NULL`).Scan(&segments); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d splits, %d segment rows", splits.Load(), segments)
	assertGolden(t, exportBytes(t, db))
	s := verifyClean(t, db)
	if s.Records != 3544 || s.Priced != 3544 {
		t.Fatalf("verified %d records, %d priced; want 3544", s.Records, s.Priced)
	}
}

// Pricing in any random split of batches, stopping and resuming from the
// stored checkpoint between runs (a new distributor each time, as after a
// restart), gives exactly the one-pass result.
func TestRandomBatchesAndResumesEqualOnePass(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("PRICER_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (PRICER_SEED=%d to replay)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	dsn := pgtest.NewURL(t)
	db := pgtest.OpenDB(t, dsn, dbconn.Options{MaxOpenConns: 16})
	loadVectors(t, db)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("TEST_LOG") != "" {
		quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	for round := 0; ; round++ {
		var left int64
		if err := db.QueryRow(`SELECT coalesce(sum(available - position), 0) FROM baton.tasks`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			t.Logf("finished after %d partial runs", round)
			break
		}
		if round > 200 {
			t.Fatal("no progress")
		}
		// Run a distributor with a random batch size and stop it after a
		// random number of committed batches.
		stopAfter := 1 + rng.IntN(8)
		commits := make(chan struct{}, 1000)
		cfg := distributor.Config{
			Name: "r" + strconv.Itoa(round), Heartbeat: 50 * time.Millisecond, StaleAfter: time.Second,
			BatchSize: 1 + rng.IntN(300), MaxPartitions: 1 + rng.IntN(4), Logger: quiet, UntilDone: true,
			SegmentRecords: 1 + rng.Int64N(1500),
			OnEvent: func(e distributor.Event) {
				if e.Kind == distributor.EventCheckpoint {
					commits <- struct{}{}
				}
			},
		}
		d, err := distributor.New(db, pricer.NewStore(db, "").Processor(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	wait:
		for i := 0; i < stopAfter; i++ {
			select {
			case <-commits:
			case <-d.Done(): // the round finished everything that was left
				break wait
			case <-time.After(testutil.WaitTimeout(30 * time.Second)):
				t.Fatal("no batch committed")
			}
		}
		d.Stop()
		if err := d.Err(); err != nil {
			t.Fatal(err)
		}
	}
	assertGolden(t, exportBytes(t, db))
	verifyClean(t, db)

	// The stored checkpoint carries the exact cumulative totals.
	var state []byte
	if err := db.QueryRow(`SELECT checkpoint FROM baton.tasks WHERE partition_key = 'basic-3-tiers'`).Scan(&state); err != nil {
		t.Fatal(err)
	}
	var cp pricer.Checkpoint
	if err := json.Unmarshal(state, &cp); err != nil {
		t.Fatal(err)
	}
	if cp.CumGross != 52001 || cp.CumNet != 49801 || cp.CumNetExact != "49800.9000" {
		t.Fatalf("checkpoint %+v, want gross 52001, net 49801, exact 49800.9000", cp)
	}
}

// A record whose pricing fails (here: a cumulative gross past 2^63−1
// smuggled in behind the loader's back) quarantines only its contract.
func TestPricingErrorQuarantinesOnlyThatContract(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	loadVectors(t, db)
	if _, err := db.Exec(`UPDATE baton.tasks SET checkpoint = '{"cum_gross": 9223372036854775000}', position = 0 WHERE partition_key = 'no-discount'`); err != nil {
		t.Fatal(err)
	}
	cfg := distributor.Config{Name: "q", Heartbeat: 50 * time.Millisecond, StaleAfter: time.Second,
		MaxAttempts: 2, Backoff: 10 * time.Millisecond, UntilDone: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	d, err := distributor.New(db, pricer.NewStore(db, "").Processor(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = d.Run(context.Background())
	if err == nil {
		t.Fatal("until-done succeeded with a corrupt contract")
	}
	var failed []string
	rows, err := db.Query(`SELECT partition_key FROM baton.tasks WHERE failed_at IS NOT NULL`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		_ = rows.Scan(&k)
		failed = append(failed, k)
	}
	if len(failed) != 1 || failed[0] != "no-discount" {
		t.Fatalf("quarantined %v, want [no-discount]", failed)
	}
	var priced int
	if err := db.QueryRow(`SELECT count(*) FROM baton.priced WHERE contract_id <> 'no-discount'`).Scan(&priced); err != nil {
		t.Fatal(err)
	}
	if priced != 3544-3 {
		t.Fatalf("%d records of other contracts priced, want %d", priced, 3544-3)
	}
}
