package rerate_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/pricing/ingest"
)

// wrongAmounts is the golden records file with the amounts of some
// records made wrong (123457 more or less): wrong[contract] lists their 1-based seqs
// within the contract. It returns the file's lines and, for each contract,
// the true lines of those records, in seq order.
func wrongAmounts(t *testing.T, wrong map[string][]int) (lines []string, truths map[string][]string) {
	t.Helper()
	b, err := os.ReadFile(vectors + "records.csv")
	if err != nil {
		t.Fatal(err)
	}
	lines = strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	truths = map[string][]string{}
	seen := map[string]int{}
	for i, l := range lines[1:] {
		f := strings.Split(l, ",")
		seen[f[0]]++
		for _, s := range wrong[f[0]] {
			if s != seen[f[0]] {
				continue
			}
			amount, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			truths[f[0]] = append(truths[f[0]], l)
			if amount > 123457 {
				amount -= 123457
			} else {
				amount += 123457
			}
			f[2] = strconv.FormatInt(amount, 10)
			lines[i+1] = strings.Join(f, ",")
		}
	}
	for c, seqs := range wrong {
		if len(truths[c]) != len(seqs) {
			t.Fatalf("contract %s has %d of the records %v", c, len(truths[c]), seqs)
		}
	}
	return lines, truths
}

// The loader finds the stored record an amendment names one by one for a
// contract the file names a few records of, and by unnesting the
// contract's records for one it names many of (ingest's storedMatches);
// a re-pricing starts from the records' cumulative gross up to where it
// starts, read off the chunks (reprice's recordPrefixes). Each must give
// the golden output: random-mix has 20 records amended and 2 re-delivered
// in the first file (many), big-cumulative 2 and 1 (few: the first record
// of one chunk and the last of another, each chunk's one amendment) and
// tiny-1-minor-records 1; the second file
// amends one record of random-mix past the first amendment's, so that its
// re-pricing starts from a prefix whose amounts the first amendment
// changed and whose current rows are of two generations.
func TestAmendmentsFewAndManyToGolden(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{MaxOpenConns: 8})
	ctx := context.Background()
	var many []int
	for s := 100; len(many) < 20; s += 67 {
		many = append(many, s)
	}
	lines, truths := wrongAmounts(t, map[string][]int{
		"random-mix":           append(many, 1900),
		"big-cumulative":       {1, 1200}, // the first and last record of its two chunks, one amendment each
		"tiny-1-minor-records": {150},
	})
	if _, err := ingest.NewStore(db, "").Load(ctx, ingest.Options{TiersPath: vectors + "tiers.csv", RecordsPath: writeFile(t, "records.csv", lines)}); err != nil {
		t.Fatal(err)
	}
	runUntilDone(t, db, distributor.Config{BatchSize: 128})

	// The first file: the 20 amendments of random-mix and both of
	// big-cumulative, with re-deliveries of records stored as they are.
	first := []string{"contract_id,record_id,amount_minor"}
	first = append(first, truths["random-mix"][:20]...)
	first = append(first, truths["big-cumulative"]...)
	first = append(first, truths["tiny-1-minor-records"]...)
	first = append(first, recordLine(t, "random-mix", 1), recordLine(t, "random-mix", 2000), recordLine(t, "big-cumulative", 600))
	rep, err := ingest.NewStore(db, "").Load(ctx, ingest.Options{RecordsPath: writeFile(t, "amend1.csv", first), Amend: true, Reason: "first"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.RecordsAmended != 23 || rep.RecordsRedelivered != 3 || rep.ContractsRepriced != 3 {
		t.Fatalf("report %+v, want 23 records amended, 3 re-delivered, 3 contracts re-priced", rep)
	}
	// Each amendment names the record's seq and its amount before.
	for c, seqs := range map[string][]int{"random-mix": many, "big-cumulative": {1, 1200}, "tiny-1-minor-records": {150}} {
		for _, s := range seqs {
			if n := count(t, db.DB, `SELECT count(*) FROM baton.amendments a JOIN baton.records r ON r.contract_id = a.contract_id AND r.seq = a.seq
				WHERE a.contract_id = ? AND a.seq = ? AND a.reason = 'first' AND a.record_id = r.record_id
				  AND a.new_amount_minor = r.amount_minor AND abs(a.old_amount_minor - r.amount_minor) = 123457`, c, s); n != 1 {
				t.Errorf("contract %s seq %d: %d amendment rows naming it with its amounts, want 1", c, s, n)
			}
		}
	}
	if n := count(t, db.DB, `SELECT count(*) FROM baton.amendments`); n != 23 {
		t.Errorf("%d amendment rows, want 23", n)
	}
	runUntilDone(t, db, distributor.Config{BatchSize: 128})

	// The second file: random-mix's last wrong record, inside the first
	// amendment's re-priced range.
	second := []string{"contract_id,record_id,amount_minor", truths["random-mix"][20]}
	if _, err := ingest.NewStore(db, "").Load(ctx, ingest.Options{RecordsPath: writeFile(t, "amend2.csv", second), Amend: true, Reason: "second"}); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db.DB, `SELECT count(DISTINCT generation) FROM baton.priced_rows WHERE contract_id = 'random-mix' AND seq < 1900`); n != 2 {
		t.Fatalf("random-mix's prefix holds rows of %d generations, want 2", n)
	}
	runUntilDone(t, db, distributor.Config{BatchSize: 128})
	sameBytes(t, "export after both amendments", exportBytes(t, db), golden(t))
	verifyClean(t, db)
}

// recordLine is the golden records file's line of contract's record seq
// (1-based within the contract).
func recordLine(t *testing.T, contract string, seq int) string {
	t.Helper()
	b, err := os.ReadFile(vectors + "records.csv")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n")[1:] {
		if strings.HasPrefix(l, contract+",") {
			if n++; n == seq {
				return l
			}
		}
	}
	t.Fatalf("contract %s has no record %d", contract, seq)
	return ""
}
