package ingest

import (
	"context"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/schema"
)

// The records of the repeat candidates are found with each pruned chunk
// of their contracts unnested once, not once per candidate, on the direct
// copy and on the staged path: a pruned file
// loaded again makes every one of its records a candidate, and a plan
// that unnested each pruned chunk per candidate (as the planner chose for
// the plain join) took longer than the soak's database stayed up between
// restarts, so that such a load never committed (it failed with the
// connection lost, "checking repeated record ids: unexpected EOF").
func TestRepeatLookupsUnnestEachPrunedChunkOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	sql := func(q string) string { return schema.SQL("baton", q) }

	// Eight contracts with 20 pruned chunks of 300 records each, as the
	// fault soak had them: a pruned load's file loaded again makes the
	// records of two of the chunks candidates (but one in seven, and an id
	// pruned from none).
	const contracts, chunks, per = 8, 20, 300
	if _, err := tx.Exec(ctx, sql(`
INSERT INTO {{.Schema}}.pruned_chunks (contract_id, first_seq, last_seq, load_id, record_ids, amounts)
SELECT c, k * $1 + 1, k * $1 + $1, 1,
       ARRAY(SELECT 'r' || s FROM generate_series(k * $1 + 1, k * $1 + $1) s),
       ARRAY(SELECT s % 997 + 1 FROM generate_series(k * $1 + 1, k * $1 + $1) s)
  FROM generate_series(1, $3::int) n, format('c%s', n) c, generate_series(0, $2::int - 1) k`), per, chunks, contracts); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "ANALYZE baton.pruned_chunks"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, sqlCandidateTables); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `
INSERT INTO load_candidates
SELECT c, 'r' || s FROM generate_series(1, $2::int) n, format('c%s', n) c, generate_series($1::int * 5 + 1, $1::int * 7) s WHERE s % 7 <> 3
 UNION ALL SELECT 'c1', 'new'`, per, contracts); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "ANALYZE load_candidates ("+candidatesAnalyzed+")"); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, sql(sqlCandidateRecords))
	if err != nil {
		t.Fatal(err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowToAddrOfStructByPos[struct {
		Contract, ID        string
		Seq, Amount, LoadID int64
		Pruned              bool
	}])
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for s := per*5 + 1; s <= per*7; s++ {
		if s%7 != 3 {
			want += contracts
		}
	}
	if len(found) != want {
		t.Fatalf("%d candidate records found, want %d", len(found), want)
	}
	for _, f := range found {
		if !f.Pruned || f.ID != "r"+strconv.FormatInt(f.Seq, 10) || f.Amount != f.Seq%997+1 {
			t.Fatalf("candidate record %+v", *f)
		}
	}

	if n := unnests(t, tx, sql(sqlCandidateRecords)); n > contracts*chunks {
		t.Fatalf("the direct copy's plan unnested %d chunks for the %d pruned ones", n, contracts*chunks)
	}

	// The staged path's comparison, the candidates staged as a file's
	// rows with the amounts they were pruned with.
	if _, err := tx.Exec(ctx, sqlCreateStaging); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `
INSERT INTO load_records (line, contract_id, record_id, amount_minor)
SELECT row_number() OVER (), contract_id, record_id, substr(record_id, 2)::bigint % 997 + 1
  FROM load_candidates WHERE record_id <> 'new'`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "ANALYZE load_records ("+recordsAnalyzed+")"); err != nil {
		t.Fatal(err)
	}
	if n := unnests(t, tx, sql(sqlRecordPruned)); n > contracts*chunks {
		t.Fatalf("the staged path's plan unnested %d chunks for the %d pruned ones", n, contracts*chunks)
	}
	if _, err := tx.Exec(ctx, sql(sqlRecordPruned)); err != nil {
		t.Fatal(err)
	}
	var redelivered int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM load_records WHERE redelivered AND err IS NULL`).Scan(&redelivered); err != nil {
		t.Fatal(err)
	}
	if redelivered != want {
		t.Fatalf("the staged path found %d rows re-delivered, want %d", redelivered, want)
	}
}

// unnests runs q under EXPLAIN ANALYZE, rolled back, and returns how many
// times its plan's function scans (the unnests of chunks) ran.
func unnests(t *testing.T, tx pgx.Tx, q string) int {
	t.Helper()
	ctx := context.Background()
	sp, err := tx.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Rollback(ctx)
	var plan []struct{ Plan planNode }
	if err := sp.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+q).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	return plan[0].Plan.unnests()
}

// planNode is a node of EXPLAIN (FORMAT JSON)'s plan.
type planNode struct {
	NodeType string     `json:"Node Type"`
	Loops    int        `json:"Actual Loops"`
	Plans    []planNode `json:"Plans"`
}

// unnests is how many times the plan's function scans ran.
func (p planNode) unnests() int {
	n := 0
	if p.NodeType == "Function Scan" {
		n = p.Loops
	}
	for _, c := range p.Plans {
		n += c.unnests()
	}
	return n
}
