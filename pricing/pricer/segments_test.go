package pricer_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing/export"
	"github.com/batonhq/baton/pricing/pricer"
)

// refuseSegment is the pricer, but for one segment, whose every batch
// fails: split contracts are priced but for that segment's records.
type refuseSegment struct {
	*pricer.Processor
	key string
}

var errRefused = errors.New("segment refused by the test")

func (p refuseSegment) Process(ctx context.Context, b *distributor.Batch) (distributor.Result, error) {
	if b.Lease.Key == p.key {
		return distributor.Result{}, errRefused
	}
	return p.Processor.Process(ctx, b)
}

func (p refuseSegment) ProcessGroup(ctx context.Context, g *distributor.Group) ([]distributor.Result, error) {
	for _, b := range g.Batches {
		if b.Lease.Key == p.key {
			return nil, errRefused
		}
	}
	return p.Processor.ProcessGroup(ctx, g)
}

// priceSplitRefusing prices everything with contracts split into segments
// of a chunk each, but for segment key (if not empty), which is
// quarantined at its first failure with its records unpriced.
func priceSplitRefusing(t *testing.T, db *dbconn.DB, key string) {
	t.Helper()
	cfg := distributor.Config{Name: "seg", Heartbeat: 100 * time.Millisecond, StaleAfter: time.Second,
		BatchSize: 100, SegmentRecords: 1, MaxAttempts: 1, UntilDone: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	d, err := distributor.New(db, refuseSegment{Processor: pricer.NewStore(db, "").Processor(), key: key}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := d.Run(ctx); key == "" && err != nil || key != "" && !errors.Is(err, distributor.ErrIncomplete) {
		t.Fatalf("pricing with segment %q refused: %v", key, err)
	}
	rows, err := db.Query(`SELECT partition_key, position, available, coalesce(last_error, '') FROM baton.tasks WHERE failed_at IS NOT NULL ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k, e string
		var pos, avail int64
		if err := rows.Scan(&k, &pos, &avail, &e); err != nil {
			t.Fatal(err)
		}
		if k != key {
			t.Errorf("%s quarantined at %d of %d: %s", k, pos, avail, e)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

func committedMismatches(t *testing.T, db *dbconn.DB) []pricer.CommittedMismatch {
	t.Helper()
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
	return bad
}

// A contract split into segments has its task row's position past every
// segment at once. Until a segment has priced its records, retention
// keeps them (and prunes what is priced), progress counts them unpriced,
// export --complete refuses, and the committed output checks out against
// the processed prefix; once the segment is priced, all of it goes.
func TestSplitContractUnpricedSegment(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	ctx := context.Background()
	// Contract a: 1,500 records in each of two loads (chunks 1–1024,
	// 1025–1500, 1501–2524, 2525–3000); b: 700 in the first.
	load1 := loadRecords(t, db, []string{"a", "b"}, map[string]int{"a": 1500, "b": 700}, "l1")
	load2 := loadRecords(t, db, nil, map[string]int{"a": 1500}, "l2")
	var first int64
	if err := db.QueryRow(`SELECT min(first_seq) FROM baton.record_chunks WHERE load_id = ? AND contract_id = 'a'`, load2).Scan(&first); err != nil {
		t.Fatal(err)
	}
	refused := partition.SegmentKey("a", first-1)
	priceSplitRefusing(t, db, refused)

	var segPos, segAvail, rowPos int64
	if err := db.QueryRow(`SELECT position, available FROM baton.tasks WHERE kind = 'pricing' AND partition_key = ? AND segment_of = 'a' AND failed_at IS NOT NULL`,
		refused).Scan(&segPos, &segAvail); err != nil {
		t.Fatalf("the refused segment %s: %v", refused, err)
	}
	if err := db.QueryRow(`SELECT position FROM baton.tasks WHERE kind = 'pricing' AND partition_key = 'a'`).Scan(&rowPos); err != nil {
		t.Fatal(err)
	}
	if segPos != 1500 || segAvail <= segPos || rowPos != 3000 {
		t.Fatalf("segment %s at %d of %d, contract row at %d; want the segment at 1500 and the row at 3000", refused, segPos, segAvail, rowPos)
	}
	unpriced := segAvail - segPos
	if n := count(t, db, `SELECT count(*) FROM baton.priced WHERE contract_id = 'a' AND seq > ? AND seq <= ?`, segPos, segAvail); n != 0 {
		t.Fatalf("%d priced rows in the refused segment", n)
	}

	// Progress and export --complete see the segment's records unpriced.
	p, err := pricer.NewStore(db, "").CheckProgress(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p.Unpriced != unpriced || p.Priced != 3700-unpriced || p.Complete() {
		t.Fatalf("progress %+v; want %d unpriced, %d priced", p, unpriced, 3700-unpriced)
	}
	var out strings.Builder
	if n, err := export.NewStore(db, "").WriteComplete(ctx, &out); !errors.Is(err, export.ErrIncomplete) || n != 0 || out.Len() != 0 {
		t.Fatalf("export --complete: %d rows, %d bytes, %v; want nothing and ErrIncomplete", n, out.Len(), err)
	}

	// The committed output checks out against the processed prefix.
	for _, m := range committedMismatches(t, db) {
		t.Errorf("verify committed: %s", m)
	}

	// Load 2 is skipped, nothing of it removed; load 1 is all priced.
	chunks2 := count(t, db, `SELECT count(*) FROM baton.record_chunks WHERE load_id = ?`, load2)
	res := prune(t, db, pricer.PruneConfig{BatchRecords: 1}, load2, load1)
	if res[0].Outcome != pricer.PruneSkipped || res[0].Unpriced != 1500 || !strings.Contains(res[0].Reason, "not priced yet") {
		t.Fatalf("load 2: %+v", res[0])
	}
	if n := count(t, db, `SELECT count(*) FROM baton.record_chunks WHERE load_id = ?`, load2); n != chunks2 {
		t.Fatalf("load 2 has %d chunks after a refused prune, had %d", n, chunks2)
	}
	if res[1].Outcome != pricer.PruneDone || res[1].Records != 2200 {
		t.Fatalf("load 1: %+v", res[1])
	}
	for _, m := range committedMismatches(t, db) {
		t.Errorf("verify committed after pruning load 1: %s", m)
	}

	// The segment retried and priced, load 2 goes too.
	if ok, err := partition.NewStore(pgtest.Handle(db.DB), "").Kind(pricer.Kind).Retry(ctx, refused); err != nil || !ok {
		t.Fatalf("retrying %s: %v, %v", refused, ok, err)
	}
	runUntilDone(t, db, distributor.Config{Name: "p", Heartbeat: 100 * time.Millisecond, StaleAfter: time.Second, BatchSize: 100})
	if res := prune(t, db, pricer.PruneConfig{}, load2); res[0].Outcome != pricer.PruneDone || res[0].Records != 1500 {
		t.Fatalf("load 2 once priced: %+v", res[0])
	}
	verifyAll(t, db, true)
}

// A segment whose checkpoint says it priced records that have no priced
// rows, or priced rows past a contract's processed prefix that no
// checkpoint accounts for, are mismatches of the committed output.
func TestVerifyCommittedChecksPastThePrefix(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	loadRecords(t, db, []string{"a"}, map[string]int{"a": 1500}, "l1")
	loadRecords(t, db, nil, map[string]int{"a": 1500}, "l2")
	refused := partition.SegmentKey("a", 1500)
	priceSplitRefusing(t, db, refused)
	if bad := committedMismatches(t, db); len(bad) != 0 {
		t.Fatalf("verify committed: %v", bad)
	}
	// A finished segment past the prefix lost a priced row.
	if _, err := db.Exec(`DELETE FROM baton.priced WHERE contract_id = 'a' AND seq = 2900`); err != nil {
		t.Fatal(err)
	}
	bad := committedMismatches(t, db)
	if len(bad) != 1 || bad[0].ContractID != "a" || bad[0].Position != 1500 || bad[0].PricedAfter != bad[0].ProcessedAfter-1 {
		t.Fatalf("after deleting a priced row past the prefix: %v", bad)
	}
	if !strings.Contains(bad[0].String(), fmt.Sprintf("%d priced rows after it", bad[0].PricedAfter)) {
		t.Fatalf("mismatch reads %q", bad[0])
	}
}

// Retention goes by the processed prefix, not by the contract row's
// position, which a split moves past its segments: a segment whose
// checkpoint is behind (here moved back, as a failover to a standby that
// had not received its last commits would) keeps its chunks, priced rows
// and all, until it has caught up again.
func TestPruneKeepsChunksOfSegmentBehind(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	load1 := loadRecords(t, db, []string{"a"}, map[string]int{"a": 1500}, "l1")
	load2 := loadRecords(t, db, nil, map[string]int{"a": 1500}, "l2")
	priceSplitRefusing(t, db, "")
	behind := partition.SegmentKey("a", 1500)
	res, err := db.Exec(`UPDATE baton.tasks SET position = 1500 WHERE kind = 'pricing' AND partition_key = ? AND segment_of = 'a' AND position = available`, behind)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("no caught-up segment %s to move back", behind)
	}
	chunks2 := count(t, db, `SELECT count(*) FROM baton.record_chunks WHERE load_id = ?`, load2)
	out := prune(t, db, pricer.PruneConfig{}, load2, load1)
	if out[0].Outcome != pricer.PruneSkipped || out[0].Unpriced != 1500 {
		t.Fatalf("load 2: %+v", out[0])
	}
	if n := count(t, db, `SELECT count(*) FROM baton.record_chunks WHERE load_id = ?`, load2); n != chunks2 {
		t.Fatalf("load 2 has %d chunks after a refused prune, had %d", n, chunks2)
	}
	if out[1].Outcome != pricer.PruneDone || out[1].Records != 1500 {
		t.Fatalf("load 1: %+v", out[1])
	}
}
