package ingest

import (
	"context"
	"encoding/csv"
	"os"
	"strconv"
	"testing"

	"github.com/batonhq/baton/internal/pgtest"
)

const (
	vectorTiers   = "../../testdata/vectors/tiers.csv"
	vectorRecords = "../../testdata/vectors/records.csv"
)

func TestLoadGoldenVectors(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	rep := mustLoad(t, db, Options{TiersPath: vectorTiers, RecordsPath: vectorRecords})
	if rep.RecordsAccepted != 3544 || rep.TierRows != 30 || rep.ContractsCreated != 12 ||
		rep.RecordsRedelivered != 0 || rep.RowsRejected != 0 || rep.LoadID == 0 {
		t.Fatalf("report = %+v", rep)
	}

	// Seqs are 1..n per contract in file order.
	f, err := os.Open(vectorRecords)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	all, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]seqRow{}
	for _, rec := range all[1:] {
		amount, _ := strconv.ParseInt(rec[2], 10, 64)
		want[rec[0]] = append(want[rec[0]], seqRow{rec[0], rec[1], int64(len(want[rec[0]]) + 1), amount})
	}
	got := map[string][]seqRow{}
	for _, r := range storedRecords(t, db) {
		got[r.Contract] = append(got[r.Contract], r)
	}
	if len(got) != len(want) {
		t.Fatalf("records for %d contracts, want %d", len(got), len(want))
	}
	for c, w := range want {
		g := got[c]
		if len(g) != len(w) {
			t.Fatalf("contract %s: %d records, want %d", c, len(g), len(w))
		}
		for i := range w {
			if g[i] != w[i] {
				t.Fatalf("contract %s record %d = %+v, want %+v", c, i, g[i], w[i])
			}
		}
	}

	var tasks, avail, badAvail int64
	if err := db.QueryRowContext(context.Background(), `SELECT count(*), sum(available),
		count(*) FILTER (WHERE available <> (SELECT count(*) FROM baton.records r WHERE r.contract_id = t.partition_key))
		FROM baton.tasks t`).Scan(&tasks, &avail, &badAvail); err != nil {
		t.Fatal(err)
	}
	if tasks != 12 || avail != 3544 || badAvail != 0 {
		t.Fatalf("tasks: %d rows, available %d in total, %d wrong; want 12, 3544, 0", tasks, avail, badAvail)
	}
	var loads, accepted int64
	if err := db.QueryRowContext(context.Background(),
		"SELECT count(*), sum(records_accepted) FROM baton.loads WHERE finished_at IS NOT NULL").Scan(&loads, &accepted); err != nil {
		t.Fatal(err)
	}
	if loads != 1 || accepted != 3544 {
		t.Fatalf("loads: %d rows, %d accepted", loads, accepted)
	}
}
