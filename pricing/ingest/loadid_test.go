package ingest

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/batonhq/baton/internal/pgtest"
)

// Load ids count committed loads: loads that fail take none, so the first
// load that succeeds is load 1 whatever failed before it, and the loads
// table has no gaps. A writer that takes ids from the column's sequence
// (a loader of an earlier release) does not collide with them.
func TestLoadIDsCountCommittedLoadsOnly(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	bad := writeFile(t, "bad.csv", th+"c1,0,0\nc2,0,10001\n")
	fail := func() {
		t.Helper()
		var ie *InvalidInputError
		if _, err := load(ctx, db, Options{TiersPath: bad}); !errors.As(err, &ie) {
			t.Fatalf("load of invalid tiers: %v, want an *InvalidInputError", err)
		}
	}
	fail()
	fail()
	if rep := mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", goodTiers)}); rep.LoadID != 1 {
		t.Fatalf("first load to succeed, after two failed: load %d, want load 1", rep.LoadID)
	}
	fail()
	if rep := mustLoad(t, db, Options{RecordsPath: writeFile(t, "r.csv", rh+"c1,r1,5\n")}); rep.LoadID != 2 {
		t.Fatalf("second load to succeed: load %d, want load 2", rep.LoadID)
	}
	// An earlier release's loader takes its id from the sequence.
	var old int64
	if err := db.QueryRowContext(ctx, `INSERT INTO baton.loads (tiers_file) VALUES ('old.csv') RETURNING load_id`).Scan(&old); err != nil {
		t.Fatal(err)
	}
	if old <= 2 {
		t.Fatalf("a load id from the sequence is %d, at or below the last load's", old)
	}
	fail()
	if rep := mustLoad(t, db, Options{RecordsPath: writeFile(t, "r2.csv", rh+"c1,r2,5\n")}); rep.LoadID != old+1 {
		t.Fatalf("load after one numbered by the sequence: load %d, want %d", rep.LoadID, old+1)
	}
	var ids []int64
	rows, err := db.QueryContext(ctx, `SELECT load_id FROM baton.loads ORDER BY load_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := []int64{1, 2, old, old + 1}; !slices.Equal(ids, want) {
		t.Fatalf("load ids %v, want %v", ids, want)
	}
}
