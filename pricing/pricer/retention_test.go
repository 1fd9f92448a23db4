package pricer_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/pricing/export"
	"github.com/batonhq/baton/pricing/ingest"
	"github.com/batonhq/baton/pricing/pricer"
)

// loadRecords loads n records (amounts varying with the seq) for each
// contract named, creating those given tiers, and returns the load's id.
func loadRecords(t *testing.T, db *dbconn.DB, tiers []string, n map[string]int, tag string) int64 {
	t.Helper()
	dir := t.TempDir()
	var tb, rb strings.Builder
	tb.WriteString("contract_id,threshold_minor,discount_bp\n")
	for _, c := range tiers {
		fmt.Fprintf(&tb, "%s,0,0\n%s,100000,250\n%s,1000000,1000\n", c, c, c)
	}
	rb.WriteString("contract_id,record_id,amount_minor\n")
	for c, k := range n {
		for i := range k {
			fmt.Fprintf(&rb, "%s,%s-%d,%d\n", c, tag, i, 1+(i*7919)%1333)
		}
	}
	opts := ingest.Options{RecordsPath: filepath.Join(dir, "records.csv")}
	if len(tiers) > 0 {
		opts.TiersPath = filepath.Join(dir, "tiers.csv")
		if err := os.WriteFile(opts.TiersPath, []byte(tb.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(opts.RecordsPath, []byte(rb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := ingest.NewStore(db, "").Load(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return rep.LoadID
}

func count(t *testing.T, db bun.IDB, q string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRowContext(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// verifyAll checks the committed output against the checkpoints, and
// with complete (every record priced) the whole output too.
func verifyAll(t *testing.T, db *dbconn.DB, complete bool) {
	t.Helper()
	if complete {
		verifyClean(t, db)
	}
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	bad, err := pricer.NewStore(db, "").VerifyCommittedTx(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range bad {
		t.Errorf("verify committed: %s", m)
	}
}

func prune(t *testing.T, db *dbconn.DB, cfg pricer.PruneConfig, ids ...int64) []pricer.LoadPrune {
	t.Helper()
	res, err := pricer.NewStore(db, "").PruneLoads(context.Background(), cfg, ids)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// Pruning removes a priced load's records and priced rows in batches;
// refuses a load not entirely priced, removing nothing of it; and leaves a
// state that verify, progress, export --complete and later loads and
// pricing agree with, including for a contract whose every record went.
func TestPruneRemovesPricedLoadsOnly(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	ctx := context.Background()
	cfg := distributor.Config{Name: "p", Heartbeat: 100 * time.Millisecond, StaleAfter: time.Second, BatchSize: 700}
	load1 := loadRecords(t, db, []string{"a", "b"}, map[string]int{"a": 3000, "b": 2500}, "l1")
	load2 := loadRecords(t, db, []string{"c"}, map[string]int{"a": 1000, "c": 1500}, "l2")
	runUntilDone(t, db, cfg)
	load3 := loadRecords(t, db, nil, map[string]int{"b": 800}, "l3")
	chunks3 := count(t, db, `SELECT count(*) FROM baton.record_chunks WHERE load_id = ?`, load3)

	// Load 3 is not priced: skipped, nothing of it removed.
	res := prune(t, db, pricer.PruneConfig{BatchRecords: 1000}, load3)
	if res[0].Outcome != pricer.PruneSkipped || res[0].Unpriced != 800 || !strings.Contains(res[0].Reason, "800 of its 800 records are not priced yet") {
		t.Fatalf("load 3: %+v", res[0])
	}
	if n := count(t, db, `SELECT count(*) FROM baton.record_chunks WHERE load_id = ?`, load3); n != chunks3 {
		t.Fatalf("load 3 has %d chunks after a refused prune, had %d", n, chunks3)
	}

	// A dry run counts and removes nothing.
	res = prune(t, db, pricer.PruneConfig{DryRun: true}, load1)
	if res[0].Outcome != pricer.PruneWould || res[0].Records != 5500 || res[0].Contracts != 2 {
		t.Fatalf("dry run: %+v", res[0])
	}
	if n := count(t, db, `SELECT count(*) FROM baton.records WHERE load_id = ?`, load1); n != 5500 {
		t.Fatalf("dry run removed records: %d left", n)
	}

	res = prune(t, db, pricer.PruneConfig{BatchRecords: 1000}, load1, load3, 99)
	if res[0].Outcome != pricer.PruneDone || res[0].Records != 5500 || res[0].Batches < 5 {
		t.Fatalf("load 1: %+v", res[0])
	}
	if res[1].Outcome != pricer.PruneSkipped || res[2].Outcome != pricer.PruneNotFound {
		t.Fatalf("loads 3 and 99: %+v", res[1:])
	}
	if n := count(t, db, `SELECT count(*) FROM baton.records WHERE load_id = ?`, load1); n != 0 {
		t.Fatalf("%d records of load 1 left", n)
	}
	if n := count(t, db, `SELECT count(*) FROM baton.priced WHERE (contract_id = 'a' AND seq <= 3000) OR (contract_id = 'b' AND seq <= 2500)`); n != 0 {
		t.Fatalf("%d priced rows of load 1 left", n)
	}
	if n := count(t, db, `SELECT count(*) FROM baton.priced`); n != 2500 {
		t.Fatalf("%d priced rows left, want load 2's 2500", n)
	}
	if n := count(t, db, `SELECT count(*) FROM baton.loads WHERE load_id = ? AND pruned_at IS NOT NULL AND records_pruned = 5500`, load1); n != 1 {
		t.Fatal("load 1's row does not say it was pruned")
	}
	if again := prune(t, db, pricer.PruneConfig{}, load1); again[0].Outcome != pricer.PruneAlready {
		t.Fatalf("load 1 again: %+v", again[0])
	}
	verifyAll(t, db, false)
	p, err := pricer.NewStore(db, "").CheckProgress(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Inconsistent) != 0 || p.Unpriced != 800 || p.Pruned != 5500 || p.Records != 3300 || p.Priced != 2500 {
		t.Fatalf("progress after pruning load 1: %+v", p)
	}

	// Pricing load 3 carries on from b's checkpoint (its first 2500
	// records gone), and the nets still add up.
	runUntilDone(t, db, cfg)
	verifyAll(t, db, true)
	if n := count(t, db, `SELECT min(seq) FROM baton.priced WHERE contract_id = 'b'`); n != 2501 {
		t.Fatalf("b's first priced seq %d, want 2501", n)
	}

	// c's only load goes: the contract keeps its count, a later load
	// numbers on after it, and export --complete agrees.
	res = prune(t, db, pricer.PruneConfig{BatchRecords: 300}, load2)
	if res[0].Outcome != pricer.PruneDone || res[0].Records != 2500 {
		t.Fatalf("load 2: %+v", res[0])
	}
	if n := count(t, db, `SELECT count(*) FROM baton.record_chunks WHERE contract_id = 'c'`); n != 0 {
		t.Fatalf("c has %d chunks left", n)
	}
	load4 := loadRecords(t, db, nil, map[string]int{"c": 10}, "l4")
	if n := count(t, db, `SELECT min(seq) FROM baton.records WHERE load_id = ?`, load4); n != 1501 {
		t.Fatalf("c's next load starts at seq %d, want 1501", n)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO baton.records (contract_id, seq, record_id, amount_minor, load_id) VALUES ('a', 5, 'again', 1, 0)`); err == nil || !strings.Contains(err.Error(), "already had a record with seq 5 (pruned)") {
		t.Fatalf("inserting a pruned seq through the view: %v", err)
	}
	runUntilDone(t, db, cfg)
	verifyAll(t, db, true)
	p, err = pricer.NewStore(db, "").CheckProgress(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Complete() || p.Pruned != 8000 || p.Records != 810 {
		t.Fatalf("progress: %+v", p)
	}
	var buf strings.Builder
	rows, err := export.NewStore(db, "").WriteComplete(ctx, &buf)
	if err != nil || rows != 810 {
		t.Fatalf("export --complete after pruning: %d rows, %v", rows, err)
	}
}

// A batch whose chunks lack a priced row (or whose priced rows do not
// match) is rolled back: nothing of it is removed.
func TestPruneRefusesOutputThatDoesNotMatch(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	ctx := context.Background()
	load := loadRecords(t, db, []string{"a"}, map[string]int{"a": 2000}, "x")
	runUntilDone(t, db, distributor.Config{Name: "p", Heartbeat: 100 * time.Millisecond, StaleAfter: time.Second})
	if _, err := db.ExecContext(ctx, `DELETE FROM baton.priced WHERE contract_id = 'a' AND seq = 10`); err != nil {
		t.Fatal(err)
	}
	_, err := pricer.NewStore(db, "").PruneLoads(ctx, pricer.PruneConfig{BatchRecords: 100}, []int64{load})
	if !errors.Is(err, pricer.ErrCorrupt) || !strings.Contains(err.Error(), "1024 records") {
		t.Fatalf("pruning a chunk with a missing priced row: %v", err)
	}
	if n := count(t, db, `SELECT count(*) FROM baton.records`); n != 2000 {
		t.Fatalf("%d records left of 2000", n)
	}
	if _, err := db.ExecContext(ctx, `UPDATE baton.priced SET net_minor = net_minor + 1 WHERE contract_id = 'a' AND seq = 1500`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `DELETE FROM baton.record_chunks WHERE contract_id = 'a' AND first_seq = 1`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `DELETE FROM baton.priced WHERE contract_id = 'a' AND seq <= 1024`); err != nil {
		t.Fatal(err)
	}
	if _, err := pricer.NewStore(db, "").PruneLoads(ctx, pricer.PruneConfig{}, []int64{load}); !errors.Is(err, pricer.ErrCorrupt) || !strings.Contains(err.Error(), "1 not adding up") {
		t.Fatalf("pruning a priced row whose net does not add up: %v", err)
	}
	if n := count(t, db, `SELECT count(*) FROM baton.records`); n != 976 {
		t.Fatalf("%d records left of 976", n)
	}
}

// A pruning stopped between batches has removed whole batches only, and
// pruning the load again carries on to the end.
func TestPruneInterruptedResumes(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	load := loadRecords(t, db, []string{"a", "b"}, map[string]int{"a": 3000, "b": 3000}, "x")
	runUntilDone(t, db, distributor.Config{Name: "p", Heartbeat: 100 * time.Millisecond, StaleAfter: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res, err := pricer.NewStore(db, "").PruneLoads(ctx, pricer.PruneConfig{BatchRecords: 1000, OnBatch: func(int64, int64, time.Duration) { cancel() }}, []int64{load})
	if err != nil || len(res) != 1 || res[0].Outcome != pricer.PruneInterrupted || res[0].Records != 1024 {
		t.Fatalf("interrupted prune: %+v, %v", res, err)
	}
	if n := count(t, db, `SELECT count(*) FROM baton.loads WHERE load_id = ? AND prune_started_at IS NOT NULL AND pruned_at IS NULL AND records_pruned = 1024`, load); n != 1 {
		t.Fatal("the loads row does not show a pruning under way")
	}
	verifyAll(t, db, true)
	res = prune(t, db, pricer.PruneConfig{BatchRecords: 1000}, load)
	if res[0].Outcome != pricer.PruneDone || res[0].Records != 6000-1024 {
		t.Fatalf("resumed prune: %+v", res[0])
	}
	if n := count(t, db, `SELECT count(*) FROM baton.priced`) + count(t, db, `SELECT count(*) FROM baton.record_chunks`); n != 0 {
		t.Fatalf("%d rows left", n)
	}
	verifyAll(t, db, true)
}
