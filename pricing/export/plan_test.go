package export

import (
	"context"
	"strings"
	"testing"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/schema"
)

// The export reads priced through its primary key even where the planner,
// left alone, would read the whole table and sort it (as it does once
// priced is large and its physical order looks uncorrelated with the
// key): here random page reads are made to look a thousand times dearer,
// which makes the sort the planner's choice, as the control shows.
func TestExportReadsInKeyOrderWithoutSorting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	if _, err := db.ExecContext(ctx, `INSERT INTO baton.priced
		(contract_id, seq, record_id, gross_minor, discount_minor, net_minor, claim_version, priced_by)
		SELECT 'c' || (i % 97), i, 'r' || i, i, 0, i, 1, 'test' FROM generate_series(1, 20000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `ANALYZE baton.priced_rows, baton.contracts`); err != nil {
		t.Fatal(err)
	}
	plan := func(keyOrdered bool) string {
		t.Helper()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
		if _, err := tx.ExecContext(ctx, `SET LOCAL random_page_cost = 4000`); err != nil {
			t.Fatal(err)
		}
		if keyOrdered {
			for _, q := range keyOrder {
				if _, err := tx.ExecContext(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
		}
		var lines []string
		rows, err := tx.QueryContext(ctx, `EXPLAIN `+schema.SQL("", selectSQL))
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var l string
			if err := rows.Scan(&l); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, l)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return strings.Join(lines, "\n")
	}
	if p := plan(false); !strings.Contains(p, "Sort") {
		t.Fatalf("control: with random reads this dear the planner should sort, but chose:\n%s", p)
	}
	p := plan(true)
	if strings.Contains(p, "Sort") || !strings.Contains(p, "Index Scan using priced_rows_key") {
		t.Errorf("the export's plan is not a scan of priced_rows_key without a sort:\n%s", p)
	}
}
