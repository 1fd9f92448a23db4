package tables_test

import (
	"context"
	"fmt"
	"testing"

	"go.uber.org/goleak"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/pricing/internal/tables"
	"github.com/batonhq/baton/pricing/pricingschema"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.WithServer(m, pricingschema.Set)) }

// One switch statement for many contracts supersedes each one's current
// generation before it makes the new one current, whatever join order
// the planner picks: generations_current allows one current generation a
// contract, checked row by row, and an approval of 10,000 previews was
// refused by it when the planner's merge joins ran the promotion first.
// Also checked on a few contracts, with nested loops.
func TestSwitchSupersedesBeforeItPromotes(t *testing.T) {
	t.Parallel()
	for _, n := range []int{3, 10000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
			if _, err := db.ExecContext(ctx, `
				INSERT INTO baton.contracts (contract_id, current_generation)
				SELECT 'c-' || lpad(i::text, 6, '0'), 1 FROM generate_series(1, ?) AS i;
				INSERT INTO baton.generations (contract_id, generation, state, from_seq, tiers)
				SELECT contract_id, g, CASE g WHEN 1 THEN 'current' ELSE 'pricing' END, 0, '[]'
				  FROM baton.contracts, generate_series(1, 2) AS g;
				ANALYZE baton.contracts, baton.generations`, n); err != nil {
				t.Fatal(err)
			}
			contracts, gens := make([]string, n), make([]int64, n)
			for i := range contracts {
				contracts[i], gens[i] = fmt.Sprintf("c-%06d", i+1), 2
			}
			rows, err := db.DB.DB.QueryContext(ctx, tables.New(db, "").SQL(tables.SwitchSQL), contracts, gens, true)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			i := 0
			for ; rows.Next(); i++ {
				var (
					contract                string
					old, promoted, switched int64
				)
				if err := rows.Scan(&contract, &old, &promoted, &switched); err != nil {
					t.Fatal(err)
				}
				if i >= n || contract != contracts[i] || old != 1 || promoted != 1 || switched != 1 {
					t.Fatalf("row %d: %s, old %d, promoted %d, switched %d; want %s switched from 1", i, contract, old, promoted, switched, contracts[min(i, n-1)])
				}
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			var current, superseded, on2 int
			if err := db.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE state = 'current' AND generation = 2),
				count(*) FILTER (WHERE state = 'superseded' AND generation = 1),
				(SELECT count(*) FROM baton.contracts WHERE current_generation = 2) FROM baton.generations`).Scan(&current, &superseded, &on2); err != nil {
				t.Fatal(err)
			}
			if i != n || current != n || superseded != n || on2 != n {
				t.Fatalf("%d rows; %d generations 2 current, %d generations 1 superseded, %d contracts on 2; want %d of each", i, current, superseded, on2, n)
			}
		})
	}
}

// With $3 the switch records the new generation's pricing as started
// (when its first batch is the one that switches it) and leaves a start
// already recorded alone; without it (an approval) it records none.
func TestSwitchRecordsTheStartOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	for _, start := range []bool{true, false} {
		t.Run(fmt.Sprint(start), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
			if _, err := db.ExecContext(ctx, `
				INSERT INTO baton.contracts (contract_id, current_generation) VALUES ('started', 1), ('unstarted', 1);
				INSERT INTO baton.generations (contract_id, generation, state, from_seq, tiers, pricing_started_at)
				SELECT contract_id, g, CASE g WHEN 1 THEN 'current' ELSE 'pricing' END, 0, '[]',
				       CASE WHEN g = 2 AND contract_id = 'started' THEN timestamptz '2026-01-02 03:04:05+00' END
				  FROM baton.contracts, generate_series(1, 2) AS g`); err != nil {
				t.Fatal(err)
			}
			rows, err := db.DB.DB.QueryContext(ctx, tables.New(db, "").SQL(tables.SwitchSQL), []string{"started", "unstarted"}, []int64{2, 2}, start)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
			}
			if err := rows.Close(); err != nil {
				t.Fatal(err)
			}
			var kept, recorded bool
			if err := db.QueryRowContext(ctx, `SELECT
				bool_or(contract_id = 'started' AND pricing_started_at = timestamptz '2026-01-02 03:04:05+00'),
				bool_or(contract_id = 'unstarted' AND pricing_started_at = finished_at)
				FROM baton.generations WHERE generation = 2 AND state = 'current'`).Scan(&kept, &recorded); err != nil {
				t.Fatal(err)
			}
			if !kept || recorded != start {
				t.Fatalf("with $3 %v: a recorded start kept %v, the missing one recorded as the finish %v; want true, %v", start, kept, recorded, start)
			}
		})
	}
}
