package rerate_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/uptrace/bun"
	"go.uber.org/goleak"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing"
	"github.com/batonhq/baton/pricing/export"
	"github.com/batonhq/baton/pricing/ingest"
	"github.com/batonhq/baton/pricing/pricer"
	"github.com/batonhq/baton/pricing/pricingschema"
	"github.com/batonhq/baton/pricing/rerate"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.WithServer(m, pricingschema.Set)) }

const vectors = "../../testdata/vectors/"

// vectorTiers reads the golden tier sets by contract.
func vectorTiers(t *testing.T) map[string][]pricing.Tier {
	t.Helper()
	f, err := os.Open(vectors + "tiers.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]pricing.Tier{}
	for _, r := range rows[1:] {
		th, err1 := strconv.ParseInt(r[1], 10, 64)
		bp, err2 := strconv.ParseInt(r[2], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		out[r[0]] = append(out[r[0]], pricing.Tier{ThresholdMinor: th, DiscountBP: bp})
	}
	return out
}

// noDiscountTiers writes the golden tiers file with every discount 0.
// loadUndiscounted loads the golden vectors' records with tiers that give
// no discount (noDiscountTiers), to be re-priced with the golden tiers.
func loadUndiscounted(t *testing.T, db *dbconn.DB) {
	t.Helper()
	if _, err := ingest.NewStore(db, "").Load(context.Background(), ingest.Options{TiersPath: noDiscountTiers(t), RecordsPath: vectors + "records.csv"}); err != nil {
		t.Fatal(err)
	}
}

func noDiscountTiers(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(vectors + "tiers.csv")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	for i := 1; i < len(lines); i++ {
		f := strings.Split(lines[i], ",")
		f[2] = "0"
		lines[i] = strings.Join(f, ",")
	}
	p := filepath.Join(t.TempDir(), "tiers0.csv")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// testLogger discards the workers' logs, or writes them to stderr with
// TEST_LOG set.
func testLogger() *slog.Logger {
	if os.Getenv("TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func runUntilDone(t *testing.T, db *dbconn.DB, cfg distributor.Config) {
	t.Helper()
	cfg.UntilDone = true
	cfg.Name = "rerate"
	if cfg.StaleAfter == 0 {
		cfg.Heartbeat, cfg.StaleAfter = 100*time.Millisecond, time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	d, err := distributor.New(db, pricer.NewStore(db, "").Processor(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitTimeout(2*time.Minute))
	defer cancel()
	if err := d.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

func exportBytes(t *testing.T, db *dbconn.DB) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := export.NewStore(db, "").WriteComplete(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func previousBytes(t *testing.T, db *dbconn.DB) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := export.NewStore(db, "").WritePrevious(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func golden(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(vectors + "expected.csv")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sameBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	gl, wl := bytes.Split(got, []byte("\n")), bytes.Split(want, []byte("\n"))
	for i := 0; i < min(len(gl), len(wl)); i++ {
		if !bytes.Equal(gl[i], wl[i]) {
			t.Fatalf("%s differs at line %d:\n got  %s\n want %s", what, i+1, gl[i], wl[i])
		}
	}
	t.Fatalf("%s has %d lines, want %d", what, len(gl), len(wl))
}

// start runs rerate's Start, in a transaction of its own.
func start(t *testing.T, db *dbconn.DB, reqs []rerate.Request) ([]rerate.Started, error) {
	t.Helper()
	return rerate.NewStore(db, "").Start(context.Background(), reqs)
}

func verifyClean(t *testing.T, db *dbconn.DB) {
	t.Helper()
	verifyRecords(t, db, 3544)
}

// verifyRecords checks the output as verifyClean does, for n records.
func verifyRecords(t *testing.T, db *dbconn.DB, n int64) {
	t.Helper()
	s, err := pricer.NewStore(db, "").Verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range s.Mismatches {
		t.Errorf("verification: %s", m.Description)
	}
	if s.Records != n || s.Priced != n {
		t.Errorf("verified %d records, %d priced; want %d", s.Records, s.Priced, n)
	}
	found, err := pricer.NewStore(db, "").VerifyCommitted(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range found {
		t.Errorf("committed verification: %s", m)
	}
}

func count(t *testing.T, db *bun.DB, q string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// Priced under the wrong tiers (no discounts), then re-priced with the
// golden ones: the export is the golden file byte for byte, the previous
// generation is what the first pricing exported, the diff lists exactly
// the records whose amounts changed, and pruning removes the superseded
// generation only once it is old enough.
func TestTierChangeRepricesToGolden(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{MaxOpenConns: 8})
	ctx := context.Background()
	loadUndiscounted(t, db)
	runUntilDone(t, db, distributor.Config{BatchSize: 97})
	first := exportBytes(t, db)

	var reqs []rerate.Request
	for c, tiers := range vectorTiers(t) {
		reqs = append(reqs, rerate.Request{Contract: c, NewTiers: tiers, Reason: "tiers corrected", StartedBy: "test"})
	}
	started, err := start(t, db, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if len(started) != 12 {
		t.Fatalf("started %d contracts, want 12: %+v", len(started), started)
	}
	for _, s := range started {
		if s.Generation != 2 || s.From != 0 {
			t.Errorf("started %+v, want generation 2 from 0", s)
		}
	}
	// Until the new generation is current, readers see the old one.
	sameBytes(t, "export while re-pricing", exportBytesAny(t, db), first)
	if inflight, err := pricer.NewStore(db, "").GenerationsInFlight(ctx); err != nil || len(inflight) != 12 {
		t.Fatalf("generations in flight: %v, %v", inflight, err)
	}
	if found, err := pricer.NewStore(db, "").VerifyCommitted(ctx); err != nil || len(found) != 0 {
		t.Fatalf("committed verification while re-pricing: %v, %v", found, err)
	}

	runUntilDone(t, db, distributor.Config{BatchSize: 13})
	sameBytes(t, "export after re-pricing", exportBytes(t, db), golden(t))
	verifyClean(t, db)
	sameBytes(t, "previous generation", previousBytes(t, db), first)
	// Each re-priced record was written once, by generation 2, and
	// generation 1's rows stay where they were written.
	if n := count(t, db.DB, `SELECT count(*) FROM baton.priced_rows WHERE generation = 2`); n != 3544 {
		t.Errorf("%d rows of generation 2, want 3544", n)
	}
	if n := count(t, db.DB, `SELECT count(*) FROM baton.priced_rows p JOIN baton.generations g
		ON g.contract_id = p.contract_id AND g.generation = 1 WHERE p.generation = 1`); n != 3544 {
		t.Errorf("%d rows of the re-priced contracts' generation 1, want 3544", n)
	}

	var changed int64
	diffs, err := rerate.NewStore(db, "").Diff(ctx, nil, func(c rerate.Change) error {
		changed++
		if c.OldDiscount != 0 || c.NewDiscount == 0 || c.OldGross != c.NewGross {
			t.Errorf("change %+v: want no old discount, a new one and the same gross", c)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(bytes.Count(golden(t), []byte("\n"))) - 1 - int64(unchangedGolden(t)); changed != want {
		t.Errorf("%d changed records, want %d", changed, want)
	}
	if len(diffs) != 12 {
		t.Errorf("diff of %d contracts, want 12", len(diffs))
	}

	gens, err := rerate.NewStore(db, "").List(ctx, []string{"random-mix"})
	if err != nil {
		t.Fatal(err)
	}
	if len(gens) != 2 || gens[0].State != "superseded" || gens[1].State != "current" || gens[1].Reason != "tiers corrected" ||
		gens[1].StartedBy != "test" || gens[0].Records != 2000 || gens[1].Records != 2000 {
		t.Fatalf("generations of random-mix: %+v", gens)
	}
	// Generation 2's pricing started with its first batch, after it was
	// requested, and finished when it became current.
	if g := gens[1]; g.PricingStartedAt == nil || g.FinishedAt == nil || g.PricingStartedAt.Before(g.StartedAt) || g.FinishedAt.Before(*g.PricingStartedAt) {
		t.Errorf("generation 2 requested %v, pricing started %v, finished %v", g.StartedAt, g.PricingStartedAt, g.FinishedAt)
	}

	if p, err := rerate.NewStore(db, "").Prune(ctx, time.Hour); err != nil || p.Generations != 0 || p.Rows != 0 {
		t.Fatalf("pruning generations older than an hour: %+v, %v", p, err)
	}
	if p, err := rerate.NewStore(db, "").Prune(ctx, 0); err != nil || p.Generations != 12 || p.Rows != 3544 {
		t.Fatalf("pruning every superseded generation: %+v, %v", p, err)
	}
	// A pruned generation keeps its row, its record count and its totals.
	pruned, err := rerate.NewStore(db, "").List(ctx, []string{"random-mix"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pruned) != 2 || pruned[0].State != "pruned" || pruned[0].Records != gens[0].Records || pruned[0].NetTotal != gens[0].NetTotal {
		t.Fatalf("generations of random-mix once pruned: %+v, before %+v", pruned, gens)
	}
	sameBytes(t, "previous generation once pruned", previousBytes(t, db), golden(t))
	sameBytes(t, "export after pruning", exportBytes(t, db), golden(t))
}

// exportBytesAny exports without requiring pricing to be complete.
func exportBytesAny(t *testing.T, db *dbconn.DB) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := export.NewStore(db, "").Write(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// unchangedGolden counts the golden rows without a discount.
func unchangedGolden(t *testing.T) int {
	t.Helper()
	rows, err := csv.NewReader(bytes.NewReader(golden(t))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range rows[1:] {
		if r[3] == "0" {
			n++
		}
	}
	return n
}

// A worker holding the old generation's claim when the rewind commits
// cannot write another batch of it: its next commit is fenced, and the new
// generation is priced exactly once.
func TestRewindFencesTheOldGeneration(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{MaxOpenConns: 8})
	loadUndiscounted(t, db)
	const key = "random-mix"
	paused, resume := make(chan struct{}), make(chan struct{})
	fenced := make(chan struct{}, 100)
	var once sync.Once
	cfg := distributor.Config{BatchSize: 50, OnEvent: func(e distributor.Event) {
		switch {
		case e.Key != key:
		case e.Kind == distributor.EventCheckpoint:
			// Between two batches of the old generation: the claim is
			// held, no batch is in flight.
			once.Do(func() {
				close(paused)
				<-resume
			})
		case e.Kind == distributor.EventFenced || e.Kind == distributor.EventLost:
			fenced <- struct{}{}
		}
	}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runUntilDone(t, db, cfg)
	}()
	select {
	case <-paused:
	case <-time.After(testutil.WaitTimeout(time.Minute)):
		t.Fatal("no checkpoint of " + key)
	}
	oldPriced := count(t, db.DB, `SELECT position FROM baton.tasks WHERE partition_key = ?`, key)
	started, err := start(t, db, []rerate.Request{{Contract: key, NewTiers: vectorTiers(t)[key], Reason: "fence"}})
	close(resume)
	if err != nil {
		t.Fatal(err)
	}
	if len(started) != 1 || started[0].Generation != 2 {
		t.Fatalf("started %+v", started)
	}
	<-done
	select {
	case <-fenced:
	default:
		t.Error("the old generation's claim was neither fenced nor lost")
	}
	// Generation 2 was priced from the first record, once, each record's
	// row under one claim; generation 1's rows stay, superseded.
	if n := count(t, db.DB, `SELECT count(*) FROM baton.priced WHERE contract_id = ?`, key); n != 2000 {
		t.Errorf("%d priced rows of %s, want 2000", n, key)
	}
	if n := count(t, db.DB, `SELECT count(*) FROM baton.priced_rows WHERE contract_id = ? AND generation = 1`, key); n != oldPriced {
		t.Errorf("%d superseded rows of %s, want the %d the old generation priced", n, key, oldPriced)
	}
	var want bytes.Buffer
	for _, l := range bytes.SplitAfter(golden(t), []byte("\n")) {
		if bytes.HasPrefix(l, []byte(key+",")) {
			want.Write(l)
		}
	}
	var got bytes.Buffer
	for _, l := range bytes.SplitAfter(exportBytes(t, db), []byte("\n")) {
		if bytes.HasPrefix(l, []byte(key+",")) {
			got.Write(l)
		}
	}
	sameBytes(t, key+"'s export", got.Bytes(), want.Bytes())
}

// Unknown contracts are refused, naming them, and nothing changes.
func TestStartRefusesUnknownContract(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	if _, err := ingest.NewStore(db, "").Load(context.Background(), ingest.Options{TiersPath: vectors + "tiers.csv", RecordsPath: vectors + "records.csv"}); err != nil {
		t.Fatal(err)
	}
	_, err := start(t, db, []rerate.Request{{Contract: "random-mix"}, {Contract: "nope"}})
	if !errors.Is(err, rerate.ErrUnknownContract) || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("err = %v, want unknown contract nope", err)
	}
	if n := count(t, db.DB, `SELECT count(*) FROM baton.generations`); n != 0 {
		t.Fatalf("%d generation rows after a refused start", n)
	}
}

// StartTx's re-pricing belongs to the caller's transaction: rolled back
// with it, nothing of it stays (no generation, the partition not
// rewound); committed with it, the new generation is being priced.
func TestStartTxInTheCallersTransaction(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	ctx := context.Background()
	loadUndiscounted(t, db)
	runUntilDone(t, db, distributor.Config{BatchSize: 97})
	generations := rerate.NewStore(db, "")
	reqs := []rerate.Request{{Contract: "random-mix", NewTiers: vectorTiers(t)["random-mix"], Reason: "tiers corrected"}}
	startIn := func(commit bool) {
		t.Helper()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
		started, err := generations.StartTx(ctx, tx, reqs)
		if err != nil || len(started) != 1 || started[0].Generation != 2 {
			t.Fatalf("StartTx: %+v, %v; want generation 2", started, err)
		}
		if commit {
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	const taskGeneration = `SELECT generation FROM baton.tasks WHERE kind = 'pricing' AND partition_key = 'random-mix'`

	startIn(false)
	if n := count(t, db.DB, `SELECT count(*) FROM baton.generations`); n != 0 {
		t.Errorf("%d generation rows after a rolled back StartTx", n)
	}
	if g := count(t, db.DB, taskGeneration); g != 1 {
		t.Errorf("partition at generation %d after a rolled back StartTx, want 1", g)
	}

	startIn(true)
	if n := count(t, db.DB, `SELECT count(*) FROM baton.generations WHERE contract_id = 'random-mix' AND generation = 2 AND state = 'pricing'`); n != 1 {
		t.Errorf("%d generation 2 rows being priced after a committed StartTx, want 1", n)
	}
	if g := count(t, db.DB, taskGeneration); g != 2 {
		t.Errorf("partition at generation %d after a committed StartTx, want 2", g)
	}
}

// writeFile writes lines to a new file in t's temporary directory.
func writeFile(t *testing.T, name string, lines []string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A record loaded with a wrong amount, priced, then amended with the true
// one: the export is the golden file byte for byte, only the records from
// the amended one on were priced again, the previous generation is what
// was exported before, and the diff lists exactly the records re-priced
// with other amounts.
func TestAmendRepricesSuffixToGolden(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{1, 7, 500} {
		t.Run(strconv.Itoa(batch), func(t *testing.T) {
			t.Parallel()
			testAmend(t, batch)
		})
	}
}

func testAmend(t *testing.T, batch int) {
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{MaxOpenConns: 8})
	ctx := context.Background()
	const key, seq = "random-mix", 1500
	lines, truth := vectorsWithAWrongAmount(t, key, seq)
	wrong := writeFile(t, "records.csv", lines)
	if _, err := ingest.NewStore(db, "").Load(ctx, ingest.Options{TiersPath: vectors + "tiers.csv", RecordsPath: wrong}); err != nil {
		t.Fatal(err)
	}
	runUntilDone(t, db, distributor.Config{BatchSize: batch})
	first := exportBytes(t, db)

	amend := writeFile(t, "amend.csv", []string{"contract_id,record_id,amount_minor", truth})
	// Without --amend the load is refused, naming the flag.
	if _, err := ingest.NewStore(db, "").Load(ctx, ingest.Options{RecordsPath: amend}); err == nil || !strings.Contains(err.Error(), "--amend") {
		t.Fatalf("load of another amount without --amend: %v", err)
	}
	rep, err := ingest.NewStore(db, "").Load(ctx, ingest.Options{RecordsPath: amend, Amend: true, Reason: "meter corrected", StartedBy: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.RecordsAmended != 1 || rep.ContractsRepriced != 1 || rep.RecordsAccepted != 0 {
		t.Fatalf("report %+v, want 1 record amended, 1 contract re-priced, none accepted", rep)
	}
	runUntilDone(t, db, distributor.Config{BatchSize: batch})
	sameBytes(t, "export after the amendment", exportBytes(t, db), golden(t))
	verifyClean(t, db)
	sameBytes(t, "previous generation", previousBytes(t, db), first)
	// Only the suffix from the amended record on was priced again.
	if n := count(t, db.DB, `SELECT count(*) FROM baton.priced_rows WHERE contract_id = ? AND generation = 2 AND seq >= ?`, key, seq); n != 2000-seq+1 {
		t.Errorf("%d rows of %s priced by generation 2 from seq %d, want %d", n, key, seq, 2000-seq+1)
	}
	if n := count(t, db.DB, `SELECT count(*) FROM baton.priced_rows WHERE generation > 1`); n != 2000-seq+1 {
		t.Errorf("%d rows of generation 2 in all, want %d", n, 2000-seq+1)
	}
	if n := count(t, db.DB, `SELECT count(*) FROM baton.amendments WHERE contract_id = ? AND seq = ? AND generation = 2 AND reason = 'meter corrected'
		AND new_amount_minor = old_amount_minor - 123457`, key, seq); n != 1 {
		t.Errorf("%d amendment rows, want 1", n)
	}
	var changed []int64
	if _, err := rerate.NewStore(db, "").Diff(ctx, []string{key}, func(c rerate.Change) error {
		changed = append(changed, c.Seq)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(changed) == 0 || changed[0] != seq {
		t.Errorf("changed records %v, want the amended seq %d first", changed, seq)
	}
	gens, err := rerate.NewStore(db, "").List(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(gens) != 2 || gens[1].FromSeq != seq-1 || gens[1].Reason != "meter corrected" || gens[1].State != "current" {
		t.Errorf("generations %+v", gens)
	}
}

// Tiers corrected through the loader: without --reprice the change is
// refused naming the flag; with it the contracts are re-priced to the
// golden output.
func TestLoadRepriceToGolden(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{MaxOpenConns: 8})
	ctx := context.Background()
	loadUndiscounted(t, db)
	runUntilDone(t, db, distributor.Config{BatchSize: 64})
	first := exportBytes(t, db)
	if _, err := ingest.NewStore(db, "").Load(ctx, ingest.Options{TiersPath: vectors + "tiers.csv"}); err == nil || !strings.Contains(err.Error(), "--reprice") {
		t.Fatalf("tier change without --reprice: %v", err)
	}
	rep, err := ingest.NewStore(db, "").Load(ctx, ingest.Options{TiersPath: vectors + "tiers.csv", Reprice: true, Reason: "tiers corrected"})
	if err != nil {
		t.Fatal(err)
	}
	// no-discount's tier set is the same either way: unchanged, it is
	// not re-priced.
	if rep.ContractsRepriced != 11 {
		t.Fatalf("report %+v, want 11 contracts re-priced", rep)
	}
	runUntilDone(t, db, distributor.Config{BatchSize: 64})
	sameBytes(t, "export after re-pricing", exportBytes(t, db), golden(t))
	verifyClean(t, db)
	sameBytes(t, "previous generation", previousBytes(t, db), first)
}

// loadWithAWrongAmount loads the golden vectors with record seq of
// contract key at a wrong amount, and returns the amend file's line that
// corrects it.
func loadWithAWrongAmount(t *testing.T, db *dbconn.DB, key string, seq int) (truth string) {
	t.Helper()
	lines, truth := vectorsWithAWrongAmount(t, key, seq)
	if _, err := ingest.NewStore(db, "").Load(context.Background(), ingest.Options{TiersPath: vectors + "tiers.csv", RecordsPath: writeFile(t, "records.csv", lines)}); err != nil {
		t.Fatal(err)
	}
	return truth
}

// A contract split into segments, one of which has not priced its
// records, has its task row's position past them: an amendment inside
// the unpriced segment re-prices the contract from its processed prefix
// (where the records priced without a gap end), not from the amended
// record, whose checkpoint cannot be had from the priced rows; the rewind
// removes the segments and the output ends up golden.
func TestAmendInsideAnUnpricedSegment(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{MaxOpenConns: 8})
	ctx := context.Background()
	const key, seq = "random-mix", 1500
	truth := loadWithAWrongAmount(t, db, key, seq)
	runUntilDone(t, db, distributor.Config{BatchSize: 500})
	// The split state: records 1025–2000 of the contract in a segment
	// that has priced none of them; the contract's row stays at 2000.
	seg := partition.SegmentKey(key, 1024)
	for _, q := range []string{
		`DELETE FROM baton.priced_rows WHERE contract_id = '` + key + `' AND seq > 1024`,
		`INSERT INTO baton.tasks (kind, partition_key, segment_of, generation, position, available)
		 VALUES ('pricing', '` + seg + `', '` + key + `', 1, 1024, 2000)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	amend := writeFile(t, "amend.csv", []string{"contract_id,record_id,amount_minor", truth})
	rep, err := ingest.NewStore(db, "").Load(ctx, ingest.Options{RecordsPath: amend, Amend: true, Reason: "meter corrected", StartedBy: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.RecordsAmended != 1 || rep.ContractsRepriced != 1 {
		t.Fatalf("report %+v, want 1 record amended, 1 contract re-priced", rep)
	}
	if n := count(t, db.DB, `SELECT count(*) FROM baton.tasks WHERE segment_of IS NOT NULL`); n != 0 {
		t.Fatalf("%d segment rows left after the rewind", n)
	}
	gens, err := rerate.NewStore(db, "").List(ctx, []string{key})
	if err != nil {
		t.Fatal(err)
	}
	if len(gens) != 2 || gens[1].FromSeq != 1024 || gens[1].State != "pricing" {
		t.Fatalf("generations %+v; want the second from seq 1024", gens)
	}
	runUntilDone(t, db, distributor.Config{BatchSize: 500})
	sameBytes(t, "export after the amendment", exportBytes(t, db), golden(t))
	verifyClean(t, db)
}

// vectorsWithAWrongAmount is the golden records file with the amount of
// the seq-th record of contract key raised by 123,457, and that record's
// true line.
func vectorsWithAWrongAmount(t *testing.T, key string, seq int) (lines []string, truth string) {
	t.Helper()
	b, err := os.ReadFile(vectors + "records.csv")
	if err != nil {
		t.Fatal(err)
	}
	lines = strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	n := 0
	for i, l := range lines[1:] {
		if !strings.HasPrefix(l, key+",") {
			continue
		}
		if n++; n == seq {
			f := strings.Split(l, ",")
			amount, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			truth = l
			f[2] = strconv.FormatInt(amount+123457, 10)
			lines[i+1] = strings.Join(f, ",")
		}
	}
	return lines, truth
}

// Re-priced contracts claimed together are priced together (one read and
// one write for the group, pricer's groupgen.go): a tier change of every
// contract, re-priced by a worker that claims them in groups, gives the
// golden output and the previous generation unchanged, with every
// contract's new generation current, whether each member catches up in its
// group's first batch (the group switches it) or carries on in held groups
// (the held group that catches up switches it).
func TestGroupedRepricingToGolden(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{5000, 40} {
		t.Run(strconv.Itoa(batch), func(t *testing.T) {
			t.Parallel()
			db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{MaxOpenConns: 24})
			loadUndiscounted(t, db)
			runUntilDone(t, db, distributor.Config{BatchSize: batch})
			first := exportBytes(t, db)
			var reqs []rerate.Request
			for c, tiers := range vectorTiers(t) {
				reqs = append(reqs, rerate.Request{Contract: c, NewTiers: tiers, Reason: "tiers corrected", StartedBy: "test"})
			}
			if _, err := start(t, db, reqs); err != nil {
				t.Fatal(err)
			}
			var since int64
			if err := db.QueryRow(`SELECT coalesce(max(event_id), 0) FROM baton.events`).Scan(&since); err != nil {
				t.Fatal(err)
			}
			// A lease long enough that a starved machine's transactions
			// stay within their time budget (StaleAfter/2): one found too
			// long is retried smaller, its members alone.
			runUntilDone(t, db, distributor.Config{BatchSize: batch, ClaimGroup: 16, MaxPartitions: 16,
				Heartbeat: 500 * time.Millisecond, StaleAfter: 10 * time.Second})
			sameBytes(t, "export after re-pricing", exportBytes(t, db), golden(t))
			sameBytes(t, "previous generation", previousBytes(t, db), first)
			verifyClean(t, db)
			if n := count(t, db.DB, `SELECT coalesce(max(c), 0) FROM (SELECT count(*) AS c FROM baton.events
				WHERE kind = 'claimed' AND event_id > ? GROUP BY xmin::text) g`, since); n < 2 {
				t.Fatalf("largest group of re-priced contracts claimed in one transaction: %d; want several", n)
			}
			if n := count(t, db.DB, `SELECT count(*) FROM baton.contracts c JOIN baton.generations g
				ON g.contract_id = c.contract_id AND g.generation = c.current_generation
				WHERE c.current_generation = 2 AND g.state = 'current' AND g.pricing_started_at IS NOT NULL AND g.finished_at IS NOT NULL`); n != 12 {
				t.Fatalf("%d contracts with generation 2 current, started and finished; want 12", n)
			}
		})
	}
}
