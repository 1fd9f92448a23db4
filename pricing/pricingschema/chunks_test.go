package pricingschema_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/pricing/pricingschema"
	"github.com/batonhq/baton/schema"
)

type storedRecord struct {
	Contract, ID   string
	Seq, Amount, L int64
}

// A database whose pricing tables predate record_chunks (its records one
// row each) gets its records moved into chunks by Migrate: runs of
// consecutive seqs of one contract and one load, cut every 1,024 records.
// The records view then shows exactly the rows the table held, and the
// roles that could read or insert records can read the view and read or
// insert chunks.
func TestRecordsMovedIntoChunks(t *testing.T) {
	t.Parallel()
	pgtest.Server(t) // creating roles needs our own server, not a shared one
	ctx := context.Background()
	dsn := pgtest.NewEmptyURL(t)
	db := pgtest.OpenDB(t, dsn, dbconn.Options{})
	if _, err := schema.Migrate(ctx, db, schema.Config{Sets: []*schema.Set{schema.Core}}); err != nil {
		t.Fatal(err)
	}
	// The pricing set as it was before record_chunks: its first migration.
	pgtest.MigrateBefore(t, db.DB, "20261122000002", pgtest.Migrations{Set: "pricing", Dir: "migrations"})

	// Contract a: 2,600 records from load 1 then 100 from load 2; b: load
	// 1, 3, then 1 again.
	var want []storedRecord
	last := map[string]int64{}
	add := func(contract string, load int64, n int) {
		for range n {
			last[contract]++
			seq := last[contract]
			id := contract + "-" + strings.Repeat("x", int(seq%5)) + strconv.FormatInt(seq, 10)
			want = append(want, storedRecord{contract, id, seq, seq%1000 + 1, load})
		}
	}
	add("a", 1, 2600)
	add("a", 2, 100)
	add("b", 1, 3)
	add("b", 3, 1)
	add("b", 1, 1)
	for _, r := range want {
		if _, err := db.Exec(`INSERT INTO baton.records (contract_id, seq, record_id, amount_minor, load_id) VALUES (?, ?, ?, ?, ?)`,
			r.Contract, r.Seq, r.ID, r.Amount, r.L); err != nil {
			t.Fatal(err)
		}
	}
	suffix := strings.ToLower(strings.TrimPrefix(dsn[strings.LastIndex(dsn, "/")+1:], "baton_test_"))
	suffix = suffix[:strings.Index(suffix, "?")]
	reader, writer := "chunks_reader_"+suffix, "chunks_writer_"+suffix
	if _, err := db.Exec(`CREATE ROLE ` + reader + `; CREATE ROLE ` + writer + `;
		GRANT SELECT ON baton.records TO ` + reader + `; GRANT SELECT, INSERT ON baton.records TO ` + writer); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, r := range []string{reader, writer} {
			_, _ = db.Exec(`DROP OWNED BY ` + r)
			_, _ = db.Exec(`DROP ROLE ` + r)
		}
	})

	applied, err := schema.Migrate(ctx, db, schema.Config{Sets: pricingschema.Sets()})
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) < 3 || !strings.Contains(applied[0], "record_chunks") || !strings.Contains(applied[1], "records_insert") ||
		!strings.Contains(applied[2], "records_insert_load_lock") {
		t.Fatalf("applied %v, want the record_chunks, records_insert and records_insert_load_lock migrations first", applied)
	}
	if err := schema.Check(ctx, db, schema.Config{Sets: pricingschema.Sets()}); err != nil {
		t.Fatal(err)
	}

	var got []storedRecord
	if err := db.NewRaw(`SELECT contract_id AS contract, record_id AS id, seq, amount_minor AS amount, load_id AS l
		FROM baton.records ORDER BY contract_id, seq`).Scan(ctx, &got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("records after the move: %d rows, want %d (first difference at %d)", len(got), len(want), firstDiff(got, want))
	}
	type chunk struct {
		Contract          string
		First, Last, L, N int64
	}
	var chunks []chunk
	if err := db.NewRaw(`SELECT contract_id AS contract, first_seq AS first, last_seq AS last, load_id AS l, cardinality(record_ids) AS n
		FROM baton.record_chunks ORDER BY contract_id, first_seq`).Scan(ctx, &chunks); err != nil {
		t.Fatal(err)
	}
	wantChunks := []chunk{
		{"a", 1, 1024, 1, 1024}, {"a", 1025, 2048, 1, 1024}, {"a", 2049, 2600, 1, 552}, {"a", 2601, 2700, 2, 100},
		{"b", 1, 3, 1, 3}, {"b", 4, 4, 3, 1}, {"b", 5, 5, 1, 1},
	}
	if !slices.Equal(chunks, wantChunks) {
		t.Fatalf("chunks:\n%+v\nwant\n%+v", chunks, wantChunks)
	}
	for _, p := range []struct {
		role, table, priv string
		want              bool
	}{
		{reader, "baton.records", "SELECT", true}, {reader, "baton.record_chunks", "SELECT", true},
		{reader, "baton.record_chunks", "INSERT", false},
		{writer, "baton.records", "SELECT", true}, {writer, "baton.record_chunks", "SELECT", true},
		{writer, "baton.record_chunks", "INSERT", true}, {writer, "baton.record_chunks", "DELETE", false},
		{writer, "baton.records", "INSERT", true}, {reader, "baton.records", "INSERT", false},
	} {
		var has bool
		if err := db.QueryRow(`SELECT has_table_privilege(?, ?, ?)`, p.role, p.table, p.priv).Scan(&has); err != nil {
			t.Fatal(err)
		}
		if has != p.want {
			t.Errorf("%s %s on %s: %v, want %v", p.role, p.priv, p.table, has, p.want)
		}
	}
}

func firstDiff(a, b []storedRecord) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// records takes inserts as the table did: each row becomes a chunk of one
// record, read back through the view like the loader's chunks, and a seq
// or a record id the contract already has is a unique violation, as the
// table's indexes made it.
func TestRecordsViewTakesInserts(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ins := `INSERT INTO baton.records (contract_id, seq, record_id, amount_minor, load_id) VALUES (?, ?, ?, ?, 7)`
	for _, r := range []struct {
		seq    int64
		id     string
		amount int64
	}{{1, "r1", 100}, {2, "r2", 250}, {3, "r3", 1}} {
		if _, err := db.Exec(ins, "c", r.seq, r.id, r.amount); err != nil {
			t.Fatalf("inserting seq %d: %v", r.seq, err)
		}
	}
	var got []storedRecord
	if err := db.NewRaw(`SELECT contract_id AS contract, record_id AS id, seq, amount_minor AS amount, load_id AS l
		FROM baton.records ORDER BY seq`).Scan(context.Background(), &got); err != nil {
		t.Fatal(err)
	}
	want := []storedRecord{{"c", "r1", 1, 100, 7}, {"c", "r2", 2, 250, 7}, {"c", "r3", 3, 1, 7}}
	if !slices.Equal(got, want) {
		t.Fatalf("records %+v, want %+v", got, want)
	}
	var chunks int
	if err := db.QueryRow(`SELECT count(*) FROM baton.record_chunks WHERE contract_id = 'c' AND first_seq = last_seq`).Scan(&chunks); err != nil || chunks != 3 {
		t.Fatalf("%d one-record chunks (%v), want 3", chunks, err)
	}
	for _, c := range []struct {
		name   string
		seq    int64
		id     string
		amount int64
		code   string
	}{
		{"a seq the contract has", 2, "other", 5, "23505"},
		{"a record id the contract has", 4, "r2", 5, "23505"},
		{"an amount out of range", 4, "r4", 0, "23514"},
		{"a seq below 1", 0, "r4", 5, "23514"},
	} {
		_, err := db.Exec(ins, "c", c.seq, c.id, c.amount)
		var pgErr interface{ SQLState() string }
		if !errors.As(err, &pgErr) || pgErr.SQLState() != c.code {
			t.Errorf("%s: %v, want SQLSTATE %s", c.name, err, c.code)
		}
	}
	// Another contract may reuse the ids and seqs.
	if _, err := db.Exec(ins, "d", 1, "r1", 100); err != nil {
		t.Fatalf("inserting into another contract: %v", err)
	}
}
