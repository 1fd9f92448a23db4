package ingest

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
)

// TestPrunedIDsMeasure measures what keeping pruned record ids costs:
// the bytes pruned_chunks takes per pruned record, and how much longer a
// load of new records takes when the contracts it names have
// BATON_MEASURE_PRUNED_IDS pruned records whose ids it must check against
// than when the same contracts have none (pruned_chunks swapped for an
// empty table, by renames, between the rounds of the same run).
//
// The pruned chunks are written by SQL as pruning writes them (ids
// "rec-000000001" on, amounts 1 to 999,983, 1,024 a chunk, compressed on
// insert), over 1,000 contracts, without loading and pricing them first:
// TestPrunedChunksKeepRecordsExactly checks what pruning itself writes.
//
// Then the same records are stored instead (record_chunks) and pruned_chunks
// emptied, for the cost of the check before pruning, unless
// BATON_MEASURE_PRUNED_STORED=0 (copying them takes long at 100M).
//
//	BATON_MEASURE_PRUNED_IDS=100000000 go test -run TestPrunedIDsMeasure -v -timeout 3h ./pricing/ingest
func TestPrunedIDsMeasure(t *testing.T) {
	n, _ := strconv.ParseInt(os.Getenv("BATON_MEASURE_PRUNED_IDS"), 10, 64)
	if n <= 0 {
		t.Skip("set BATON_MEASURE_PRUNED_IDS to a number of pruned records to measure")
	}
	newRecords := int64(100_000)
	if v, err := strconv.ParseInt(os.Getenv("BATON_MEASURE_PRUNED_NEW"), 10, 64); err == nil && v > 0 {
		newRecords = v
	}
	const contracts = 1000
	perContract := (n + contracts - 1) / contracts
	n = perContract * contracts
	ctx := context.Background()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})

	var tiers strings.Builder
	tiers.WriteString("contract_id,threshold_minor,discount_bp\n")
	for c := range contracts {
		fmt.Fprintf(&tiers, "c%d,0,0\nc%d,100000,250\n", c, c)
	}
	mustLoad(t, db.DB, Options{TiersPath: writeFile(t, "tiers.csv", tiers.String())})

	start := time.Now()
	chunks := (perContract + ChunkSize - 1) / ChunkSize
	for from := 0; from < contracts; from += 50 {
		if _, err := db.ExecContext(ctx, `
INSERT INTO baton.pruned_chunks (contract_id, first_seq, last_seq, load_id, record_ids, amounts)
SELECT 'c' || c, k * 1024 + 1, least(k * 1024 + 1024, ?2::bigint), 1,
       ARRAY(SELECT 'rec-' || lpad(s::text, 9, '0') FROM generate_series(k * 1024 + 1, least(k * 1024 + 1024, ?2::bigint)) s),
       ARRAY(SELECT 1 + (s * 7919 + c) % 999983 FROM generate_series(k * 1024 + 1, least(k * 1024 + 1024, ?2::bigint)) s)
  FROM generate_series(?0::int, ?1::int) c, generate_series(0, ?3::bigint - 1) k`, from, min(from+49, contracts-1), perContract, chunks); err != nil {
			t.Fatal(err)
		}
		if from%200 == 0 {
			t.Logf("pruned chunks of %d contracts written (%s)", from+50, time.Since(start).Round(time.Second))
		}
	}
	if _, err := db.ExecContext(ctx, `
INSERT INTO baton.pruned_totals (contract_id, records, last_seq) SELECT contract_id, ?0, ?0 FROM baton.contracts;
UPDATE baton.tasks SET available = ?0, position = ?0 WHERE kind = 'pricing';
CREATE TABLE baton.pruned_chunks_aside (LIKE baton.pruned_chunks INCLUDING ALL)`, perContract); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `VACUUM ANALYZE baton.pruned_chunks`); err != nil {
		t.Fatal(err)
	}
	var total, toast, index, ids, amounts int64
	if err := db.QueryRowContext(ctx, `
SELECT pg_total_relation_size('baton.pruned_chunks'), pg_total_relation_size(reltoastrelid), pg_indexes_size('baton.pruned_chunks'),
       (SELECT sum(pg_column_size(record_ids)) FROM baton.pruned_chunks), (SELECT sum(pg_column_size(amounts)) FROM baton.pruned_chunks)
  FROM pg_class WHERE oid = 'baton.pruned_chunks'::regclass`).Scan(&total, &toast, &index, &ids, &amounts); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d pruned records (%d contracts of %d) written in %s: pruned_chunks %.1f MiB in all, %.2f bytes a record (ids %.2f, amounts %.2f, toast %.2f, index %.3f)",
		n, contracts, perContract, time.Since(start).Round(time.Second), float64(total)/(1<<20), float64(total)/float64(n),
		float64(ids)/float64(n), float64(amounts)/float64(n), float64(toast)/float64(n), float64(index)/float64(n))

	// Swap the pruned chunks for the empty table, or back.
	swap := func() {
		t.Helper()
		if _, err := db.ExecContext(ctx, `BEGIN;
ALTER TABLE baton.pruned_chunks RENAME TO pruned_chunks_swap;
ALTER TABLE baton.pruned_chunks_aside RENAME TO pruned_chunks;
ALTER TABLE baton.pruned_chunks_swap RENAME TO pruned_chunks_aside;
COMMIT`); err != nil {
			t.Fatal(err)
		}
	}
	var with, without []time.Duration
	pruned := true
	for round := range 6 {
		var b strings.Builder
		b.WriteString("contract_id,record_id,amount_minor\n")
		for i := range newRecords {
			fmt.Fprintf(&b, "c%d,new-%d-%d,%d\n", i%contracts, round, i, 1+i%9973)
		}
		path := writeFile(t, "new.csv", b.String())
		rep := mustLoad(t, db.DB, Options{RecordsPath: path})
		if rep.RecordsAccepted != newRecords || !rep.DirectCopy {
			t.Fatalf("round %d: %d accepted, direct copy %v (%s)", round, rep.RecordsAccepted, rep.DirectCopy, rep.gaveWay)
		}
		if pruned {
			with = append(with, rep.Duration)
		} else {
			without = append(without, rep.Duration)
		}
		t.Logf("round %d: %d new records, %s pruned records to check: %s (key set peak %.0f MiB)", round, newRecords,
			map[bool]string{true: strconv.FormatInt(n, 10), false: "no"}[pruned], rep.Duration.Round(time.Millisecond), float64(rep.keysPeak)/(1<<20))
		swap()
		pruned = !pruned
	}
	median := func(ds []time.Duration) time.Duration {
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	w, wo := median(with), median(without)
	t.Logf("median load of %d new records: %s with %d pruned records to check, %s with none (ratio %.2f, %.0f ns a pruned record)",
		newRecords, w.Round(time.Millisecond), n, wo.Round(time.Millisecond), float64(w)/float64(wo), float64(w-wo)/float64(n))
	if os.Getenv("BATON_MEASURE_PRUNED_STORED") == "0" {
		return
	}

	// The same records stored, not pruned (as a load writes them:
	// uncompressed), pruned_chunks empty: what the check cost before
	// pruning.
	start = time.Now()
	if !pruned {
		swap() // pruned_chunks holds them again
	}
	if _, err := db.ExecContext(ctx, `
INSERT INTO baton.record_chunks (contract_id, first_seq, last_seq, load_id, record_ids, amounts)
SELECT contract_id, first_seq, last_seq, load_id, record_ids || '{}'::text[], amounts || '{}'::bigint[] FROM baton.pruned_chunks`); err != nil {
		t.Fatal(err)
	}
	swap() // and pruned_chunks is empty
	var left int64
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM baton.pruned_chunks`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("pruned chunks left: %d, %v", left, err)
	}
	if _, err := db.ExecContext(ctx, `VACUUM ANALYZE baton.record_chunks`); err != nil {
		t.Fatal(err)
	}
	t.Logf("the same records stored in record_chunks in %s", time.Since(start).Round(time.Second))
	var stored []time.Duration
	for round := 6; round < 9; round++ {
		var b strings.Builder
		b.WriteString("contract_id,record_id,amount_minor\n")
		for i := range newRecords {
			fmt.Fprintf(&b, "c%d,new-%d-%d,%d\n", i%contracts, round, i, 1+i%9973)
		}
		rep := mustLoad(t, db.DB, Options{RecordsPath: writeFile(t, "new.csv", b.String())})
		if rep.RecordsAccepted != newRecords || !rep.DirectCopy {
			t.Fatalf("round %d: %d accepted, direct copy %v (%s)", round, rep.RecordsAccepted, rep.DirectCopy, rep.gaveWay)
		}
		stored = append(stored, rep.Duration)
		t.Logf("round %d: %d new records, %d stored records to check: %s", round, newRecords, n, rep.Duration.Round(time.Millisecond))
	}
	st := median(stored)
	t.Logf("median load of %d new records: %s with %d stored records to check instead (pruned ÷ stored %.2f)",
		newRecords, st.Round(time.Millisecond), n, float64(w)/float64(st))
}
