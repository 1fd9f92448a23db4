package ingest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/pricing/pricingschema"
)

func TestMain(m *testing.M) { pgtest.Main(m, pricingschema.Set) }

// writeFile writes content to name in a fresh temporary folder and returns
// its path.
func writeFile(t testing.TB, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// counts are the row counts of the tables a load writes.
type counts struct{ Contracts, Tiers, Records, Tasks, Available int64 }

func tableCounts(t testing.TB, db *bun.DB) counts {
	t.Helper()
	var c counts
	err := db.QueryRowContext(context.Background(), `SELECT
		(SELECT count(*) FROM baton.contracts), (SELECT count(*) FROM baton.tiers), (SELECT count(*) FROM baton.records),
		(SELECT count(*) FROM baton.tasks), (SELECT coalesce(sum(available), 0) FROM baton.tasks)`).
		Scan(&c.Contracts, &c.Tiers, &c.Records, &c.Tasks, &c.Available)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustLoad(t testing.TB, db *bun.DB, opts Options) Report {
	t.Helper()
	rep, err := load(context.Background(), db, opts)
	if err != nil {
		t.Fatalf("load(%+v): %v", opts, err)
	}
	return rep
}

// seqRow is one stored record.
type seqRow struct {
	Contract, RecordID string
	Seq, Amount        int64
}

func storedRecords(t testing.TB, db *bun.DB) []seqRow {
	t.Helper()
	rows, err := db.QueryContext(context.Background(),
		"SELECT contract_id, record_id, seq, amount_minor FROM baton.records ORDER BY contract_id, seq")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []seqRow
	for rows.Next() {
		var r seqRow
		if err := rows.Scan(&r.Contract, &r.RecordID, &r.Seq, &r.Amount); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// writeTo writes content to path.
func writeTo(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
