package pricer_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/pricing/ingest"
	"github.com/batonhq/baton/pricing/pricer"
)

// A contract loaded in several loads, its records in several chunks each,
// is priced in batches that start and end inside chunks and cross their
// boundaries: every record once, in seq order, with its own id and amount.
func TestChunkedContractAcrossLoads(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tiers := write("t.csv", ingest.TiersHeader+"\nk,0,0\nk,100000,250\nm,0,0\n")
	n := 0
	for i, size := range []int{ingest.ChunkSize + 476, 700, 3} {
		var b strings.Builder
		b.WriteString(ingest.RecordsHeader + "\n")
		for range size {
			n++
			fmt.Fprintf(&b, "k,id%05d,%d\n", n, n%97+1)
			if n%10 == 0 {
				fmt.Fprintf(&b, "m,id%05d,1\n", n)
			}
		}
		opts := ingest.Options{RecordsPath: write(fmt.Sprintf("r%d.csv", i), b.String())}
		if i == 0 {
			opts.TiersPath = tiers
		}
		if _, err := ingest.NewStore(db, "").Load(context.Background(), opts); err != nil {
			t.Fatal(err)
		}
	}
	runUntilDone(t, db, distributor.Config{Name: "chunks", Heartbeat: 100 * time.Millisecond, StaleAfter: time.Second, BatchSize: 333})
	rows, err := db.Query(`SELECT p.seq, p.record_id, p.gross_minor FROM baton.priced p WHERE p.contract_id = 'k' ORDER BY p.seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var i int64
	for rows.Next() {
		var seq, gross int64
		var id string
		if err := rows.Scan(&seq, &id, &gross); err != nil {
			t.Fatal(err)
		}
		i++
		if seq != i || id != fmt.Sprintf("id%05d", i) || gross != i%97+1 {
			t.Fatalf("priced seq %d: record %s gross %d; want seq %d, id%05d, gross %d", seq, id, gross, i, i, i%97+1)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if i != int64(n) {
		t.Fatalf("%d records of k priced, want %d", i, n)
	}
	if s := verifyClean(t, db); s.Priced != s.Records || s.Records != int64(n+n/10) {
		t.Fatalf("verify: %+v, want %d records priced", s, n+n/10)
	}
}

// A chunk missing from the middle of a contract's records is a gap the
// pricer reports as corrupt data: the contract is quarantined, nothing of
// it after the gap is priced.
func TestMissingChunkIsCorrupt(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	dir := t.TempDir()
	tiers := filepath.Join(dir, "t.csv")
	if err := os.WriteFile(tiers, []byte(ingest.TiersHeader+"\nk,0,0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		p := filepath.Join(dir, fmt.Sprintf("r%d.csv", i))
		if err := os.WriteFile(p, []byte(fmt.Sprintf("%s\nk,a%d,1\nk,b%d,1\n", ingest.RecordsHeader, i, i)), 0o644); err != nil {
			t.Fatal(err)
		}
		opts := ingest.Options{RecordsPath: p}
		if i == 0 {
			opts.TiersPath = tiers
		}
		if _, err := ingest.NewStore(db, "").Load(context.Background(), opts); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`DELETE FROM baton.record_chunks WHERE contract_id = 'k' AND first_seq = 3`); err != nil {
		t.Fatal(err)
	}
	d, err := distributor.New(db, pricer.NewStore(db, "").Processor(), distributor.Config{Name: "gap", Heartbeat: 50 * time.Millisecond,
		StaleAfter: time.Second, MaxAttempts: 1, UntilDone: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Run(context.Background()); err == nil {
		t.Fatal("until-done succeeded with a gap in the records")
	}
	var lastErr string
	var priced int
	if err := db.QueryRow(`SELECT coalesce(last_error, ''), (SELECT count(*) FROM baton.priced) FROM baton.tasks
		WHERE partition_key = 'k' AND failed_at IS NOT NULL`).Scan(&lastErr, &priced); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(lastErr, "record seq 5 where 3 was expected") || priced > 2 {
		t.Fatalf("last_error %q, %d priced; want the gap reported and at most seqs 1-2 priced", lastErr, priced)
	}
}

// Priced rows whose records are gone (a chunk deleted behind baton's back)
// are reported by Verify, counted through an anti-join over the records
// view.
func TestVerifyReportsPricedRowsWithoutRecords(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	loadVectors(t, db)
	runUntilDone(t, db, distributor.Config{Name: "orphans", Heartbeat: 100 * time.Millisecond, StaleAfter: time.Second})
	var gone int
	if err := db.QueryRow(`WITH d AS (
			DELETE FROM baton.record_chunks WHERE (contract_id, first_seq) =
			    (SELECT contract_id, first_seq FROM baton.record_chunks ORDER BY contract_id, first_seq LIMIT 1)
			RETURNING cardinality(record_ids) AS n)
		SELECT n FROM d`).Scan(&gone); err != nil {
		t.Fatal(err)
	}
	s, err := pricer.NewStore(db, "").Verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%d priced rows have no record", gone)
	var found bool
	for _, m := range s.Mismatches {
		found = found || m.Description == want
	}
	if gone == 0 || !found {
		t.Fatalf("mismatches %+v, want %q", s.Mismatches, want)
	}
}

// Verify's totals and its count of rows without a record take in every
// priced row, of contracts with no records at all too, and an empty
// database verifies with totals of zero (its one pass still yields them
// when there is no contract to list).
func TestVerifyCountsEveryPricedRowInItsTotals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	st := pricer.NewStore(db, "")
	s, err := st.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Contracts != 0 || s.Gross != "0" || s.Net != "0" || len(s.Mismatches) != 0 {
		t.Fatalf("empty database: %+v, want no contracts and totals of 0", s)
	}

	loadVectors(t, db)
	runUntilDone(t, db, distributor.Config{Name: "totals", Heartbeat: 100 * time.Millisecond, StaleAfter: time.Second})
	before, err := st.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(before.Mismatches) != 0 || before.Priced != before.Records || before.Records == 0 {
		t.Fatalf("after pricing: %+v", before)
	}
	var gross, net string
	if err := db.QueryRow(`SELECT sum(gross_minor)::text, sum(net_minor)::text FROM baton.priced`).Scan(&gross, &net); err != nil {
		t.Fatal(err)
	}
	if before.Gross != gross || before.Net != net {
		t.Fatalf("totals %s / %s, the priced rows sum to %s / %s", before.Gross, before.Net, gross, net)
	}

	// Two rows of a contract that has no records (the view's insert
	// creates the contract).
	if _, err := db.Exec(`INSERT INTO baton.priced (contract_id, seq, record_id, gross_minor, discount_minor, net_minor, claim_version, priced_by)
		VALUES ('ghost', 1, 'g1', 700, 0, 700, 1, 'test'), ('ghost', 2, 'g2', 300, 100, 200, 1, 'test')`); err != nil {
		t.Fatal(err)
	}
	after, err := st.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Contracts != before.Contracts || after.Priced != before.Priced {
		t.Fatalf("contracts %d, priced %d after the ghost rows; want %d and %d (only contracts with records are listed)",
			after.Contracts, after.Priced, before.Contracts, before.Priced)
	}
	wantGross, wantNet := addMinor(t, before.Gross, 1000), addMinor(t, before.Net, 900)
	if after.Gross != wantGross || after.Net != wantNet {
		t.Fatalf("totals %s / %s, want %s / %s", after.Gross, after.Net, wantGross, wantNet)
	}
	if len(after.Mismatches) != 1 || after.Mismatches[0].Description != "2 priced rows have no record" {
		t.Fatalf("mismatches %+v, want the 2 rows without a record", after.Mismatches)
	}
}

func addMinor(t *testing.T, s string, d int64) string {
	t.Helper()
	v, ok := new(big.Int).SetString(s, 10)
	if !ok {
		t.Fatalf("total %q is not an integer", s)
	}
	return v.Add(v, big.NewInt(d)).String()
}
