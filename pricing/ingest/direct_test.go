package ingest

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/batonhq/baton/internal/pgtest"
)

// Records of contracts interleaved in the file, with ids whose byte order
// differs from their numeric order, take the direct copy and get the seq
// the staged path gives them: available + rank in file order.
func TestDirectCopy(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	tiers := writeFile(t, "t.csv", th+"c2,0,0\nc10,0,0\nc1,0,0\n")
	rep := mustLoad(t, db, Options{TiersPath: tiers, RecordsPath: writeFile(t, "r1.csv", rh+"c2,x,1\nc10,y,2\nc1,z,3\nc2,w,4\n")})
	if !rep.DirectCopy || rep.RecordsAccepted != 4 || rep.ContractsCreated != 3 {
		t.Fatalf("first load: report = %+v", rep)
	}
	rep = mustLoad(t, db, Options{RecordsPath: writeFile(t, "r2.csv", rh+"c1,b,5\nc2,a,6\nc1,a,7\nc10,a,8\nc2,007,009\n")})
	if !rep.DirectCopy || rep.RecordsAccepted != 5 || rep.RecordsRedelivered != 0 {
		t.Fatalf("second load: report = %+v", rep)
	}
	want := []seqRow{
		{"c1", "z", 1, 3}, {"c1", "b", 2, 5}, {"c1", "a", 3, 7},
		{"c10", "y", 1, 2}, {"c10", "a", 2, 8},
		{"c2", "x", 1, 1}, {"c2", "w", 2, 4}, {"c2", "a", 3, 6}, {"c2", "007", 4, 9},
	}
	if got := storedRecords(t, db); !slices.Equal(got, want) {
		t.Fatalf("records = %+v, want %+v", got, want)
	}
	if c := tableCounts(t, db); c != (counts{Contracts: 3, Tiers: 3, Records: 9, Tasks: 3, Available: 9}) {
		t.Fatalf("tables: %+v", c)
	}
	var accepted int64
	if err := db.QueryRowContext(context.Background(),
		"SELECT records_accepted FROM baton.loads WHERE load_id = ?", rep.LoadID).Scan(&accepted); err != nil || accepted != 5 {
		t.Fatalf("loads.records_accepted = %d, %v", accepted, err)
	}

	// Records beside a tier change of an unpriced contract, and a new
	// contract: both apply.
	rep = mustLoad(t, db, Options{TiersPath: writeFile(t, "t3.csv", th+"c10,0,0\nc10,500,20\nc3,0,0\n"),
		RecordsPath: writeFile(t, "r3.csv", rh+"c3,a,1\nc2,b,2\n")})
	if !rep.DirectCopy || rep.RecordsAccepted != 2 || rep.ContractsCreated != 1 || rep.TierRows != 3 {
		t.Fatalf("third load: report = %+v", rep)
	}
	if got := tiersOf(t, db, "c10"); got != "0:0 500:20" {
		t.Fatalf("tiers of c10 = %v, want the new set of 2", got)
	}
	if c := tableCounts(t, db); c != (counts{Contracts: 4, Tiers: 5, Records: 11, Tasks: 4, Available: 11}) {
		t.Fatalf("tables: %+v", c)
	}
}

// The direct copy settles re-deliveries and rows invalid on their own
// itself; whenever it cannot settle a rule, the staged path loads the file
// from its start. Either way the outcome is the same as always.
func TestDirectCopyFallsBack(t *testing.T) {
	t.Parallel()
	const twoRecords = 2 * MaxAmountMinor
	cases := []struct {
		name     string
		first    string // records loaded before, with goodTiers
		tiers    string // tiers file of the load, if any
		records  string
		budget   int64 // Options.budget
		maxGross int64
		staged   bool   // the staged path stores the records
		wantRep  Report // counts only
		want     []seqRow
	}{{
		name:    "re-delivery within the file",
		records: "c1,r1,5\nc2,r1,7\nc1,r2,6\nc1,r1,5\n",
		wantRep: Report{RecordsAccepted: 3, RecordsRedelivered: 1},
		want:    []seqRow{{"c1", "r1", 1, 5}, {"c1", "r2", 2, 6}, {"c2", "r1", 1, 7}},
	}, {
		name:    "re-delivery of a stored record",
		first:   "c1,r1,5\n",
		records: "c1,r2,6\nc1,r1,5\n",
		wantRep: Report{RecordsAccepted: 1, RecordsRedelivered: 1},
		want:    []seqRow{{"c1", "r1", 1, 5}, {"c1", "r2", 2, 6}},
	}, {
		name:    "invalid row",
		records: "c1,r1,5\nc1,r2,0\nc2,r1,7\n",
		wantRep: Report{RecordsAccepted: 2, RowsRejected: 1},
		want:    []seqRow{{"c1", "r1", 1, 5}, {"c2", "r1", 1, 7}},
	}, {
		name:    "unknown contract",
		staged:  true,
		records: "c1,r1,5\nc3,r1,7\n",
		wantRep: Report{RecordsAccepted: 1, RowsRejected: 1},
		want:    []seqRow{{"c1", "r1", 1, 5}},
	}, {
		name:    "rejected tier row",
		tiers:   th + "c1,0,0\nc9,x,1\n",
		records: "c1,r1,5\n",
		wantRep: Report{RecordsAccepted: 1, RowsRejected: 1, TierRows: 1},
		want:    []seqRow{{"c1", "r1", 1, 5}},
	}, {
		name:     "near the gross limit",
		first:    "c1,r1,5\n",
		records:  "c1,r2,6\nc1,r3,6\n",
		maxGross: twoRecords,
		staged:   true,
		wantRep:  Report{RecordsAccepted: 2},
		want:     []seqRow{{"c1", "r1", 1, 5}, {"c1", "r2", 2, 6}, {"c1", "r3", 3, 6}},
	}, {
		name:    "unknown contract and a re-delivery",
		staged:  true,
		records: "c1,r1,5\nc3,r1,7\nc1,r2,6\nc1,r1,5\n",
		wantRep: Report{RecordsAccepted: 2, RecordsRedelivered: 1, RowsRejected: 1},
		want:    []seqRow{{"c1", "r1", 1, 5}, {"c1", "r2", 2, 6}},
	}, {
		name:    "a budget for one record, after an invalid row",
		records: "c1,r0,0\nc1,r1,5\nc2,r1,7\nc1,r2,6\n",
		budget:  1,
		staged:  true, // no room to keep the rejected row
		wantRep: Report{RecordsAccepted: 3, RowsRejected: 1},
		want:    []seqRow{{"c1", "r1", 1, 5}, {"c1", "r2", 2, 6}, {"c2", "r1", 1, 7}},
	}, {
		name:    "a budget for one record",
		records: "c1,r1,5\nc2,r1,7\nc1,r2,6\n",
		budget:  1,
		wantRep: Report{RecordsAccepted: 3},
		want:    []seqRow{{"c1", "r1", 1, 5}, {"c1", "r2", 2, 6}, {"c2", "r1", 1, 7}},
	}, {
		name:    "turned off",
		records: "c1,r1,5\n",
		staged:  true,
		wantRep: Report{RecordsAccepted: 1},
		want:    []seqRow{{"c1", "r1", 1, 5}},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDB(t)
			mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", goodTiers)})
			if c.first != "" {
				if rep := mustLoad(t, db, Options{RecordsPath: writeFile(t, "r1.csv", rh+c.first)}); !rep.DirectCopy {
					t.Fatalf("first load: report = %+v", rep)
				}
			}
			opts := Options{RecordsPath: writeFile(t, "r2.csv", rh+c.records), SkipInvalid: true,
				RejectPath: filepath.Join(t.TempDir(), "rejects.csv"), budget: c.budget, maxGross: c.maxGross}
			if c.name == "turned off" {
				opts.staged = true
			}
			if c.tiers != "" {
				opts.TiersPath = writeFile(t, "t2.csv", c.tiers)
			}
			rep := mustLoad(t, db, opts)
			got := Report{RecordsAccepted: rep.RecordsAccepted, RecordsRedelivered: rep.RecordsRedelivered,
				RowsRejected: rep.RowsRejected, TierRows: rep.TierRows}
			if rep.DirectCopy == c.staged || got != c.wantRep {
				t.Fatalf("report = %+v (gave way: %q), want staged %v and %+v", rep, rep.gaveWay, c.staged, c.wantRep)
			}
			if recs := storedRecords(t, db); !slices.Equal(recs, c.want) {
				t.Fatalf("records = %+v, want %+v", recs, c.want)
			}
			var avail int64
			if err := db.QueryRowContext(context.Background(), "SELECT sum(available) FROM baton.tasks").Scan(&avail); err != nil || avail != int64(len(c.want)) {
				t.Fatalf("available = %d, %v; want %d", avail, err, len(c.want))
			}
		})
	}
}

// A repeated record id with another amount is an error found after the
// direct copy gave way, reported as the staged path reports it.
func TestDirectCopyRepeatWithOtherAmount(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", goodTiers)})
	path := writeFile(t, "r.csv", rh+"c1,r1,5\nc2,r1,7\nc1,r1,6\n")
	_, err := load(context.Background(), db, Options{RecordsPath: path})
	want := path + `:4: record_id "r1" of contract c1 has amount_minor 6 here but 5 on line 2 (nothing was loaded)`
	if err == nil || err.Error() != want {
		t.Fatalf("Load = %v\nwant %s", err, want)
	}
	if c := tableCounts(t, db); c.Records != 0 || c.Available != 0 {
		t.Fatalf("tables after failed load: %+v", c)
	}
}

// A COPY that fails for any reason but a repeated record id fails the
// load, which rolls back as a whole. Here a record stored behind the
// loader's back (without raising available) takes the seq the load would
// give the next record.
func TestDirectCopyFailure(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", goodTiers), RecordsPath: writeFile(t, "r1.csv", rh+"c1,a,1\n")})
	if _, err := db.ExecContext(ctx, "INSERT INTO baton.record_chunks (contract_id, first_seq, last_seq, load_id, record_ids, amounts) VALUES ('c1', 2, 2, 0, '{stray}', '{1}')"); err != nil {
		t.Fatal(err)
	}
	_, err := load(ctx, db, Options{RecordsPath: writeFile(t, "r2.csv", rh+"c2,a,1\nc1,b,1\n")})
	if err == nil || !strings.Contains(err.Error(), "storing records") || !strings.Contains(err.Error(), "record_chunks_pkey") {
		t.Fatalf("Load = %v, want a failure storing records on record_chunks_pkey", err)
	}
	if c := tableCounts(t, db); c.Records != 2 || c.Available != 1 {
		t.Fatalf("tables after failed load: %+v", c)
	}
	var loads int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM baton.loads").Scan(&loads); err != nil || loads != 1 {
		t.Fatalf("loads rows = %d, %v; want 1 (the failed load rolled back)", loads, err)
	}
}

// The direct copy holds many contracts' records and numbers each
// contract's own from its available.
func TestDirectCopyManyContracts(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	const contracts, per = 37, 23
	var tiers, first, second strings.Builder
	tiers.WriteString(th)
	first.WriteString(rh)
	second.WriteString(rh)
	for c := range contracts {
		fmt.Fprintf(&tiers, "k%d,0,0\n", c)
		if c%3 == 0 {
			fmt.Fprintf(&first, "k%d,old,1\n", c)
		}
	}
	for i := range per {
		for c := range contracts {
			fmt.Fprintf(&second, "k%d,n%d,%d\n", (c*7)%contracts, i, i+1)
		}
	}
	mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", tiers.String()), RecordsPath: writeFile(t, "r1.csv", first.String())})
	rep := mustLoad(t, db, Options{RecordsPath: writeFile(t, "r2.csv", second.String())})
	if !rep.DirectCopy || rep.RecordsAccepted != contracts*per {
		t.Fatalf("report = %+v", rep)
	}
	for _, r := range storedRecords(t, db) {
		var c, i int
		if r.RecordID == "old" {
			if r.Seq != 1 {
				t.Fatalf("record %+v", r)
			}
			continue
		}
		fmt.Sscanf(r.Contract, "k%d", &c)
		fmt.Sscanf(r.RecordID, "n%d", &i)
		want := int64(i + 1)
		if c%3 == 0 {
			want++
		}
		if r.Seq != want || r.Amount != int64(i+1) {
			t.Fatalf("record %+v, want seq %d", r, want)
		}
	}
	if c := tableCounts(t, db); c.Records != contracts*per+(contracts+2)/3 || c.Available != c.Records {
		t.Fatalf("tables: %+v", c)
	}
}

// A row rejected on its own, or a repeated record id with another amount
// (the staged path's), shows in the reject file as written.
func TestDirectCopyHeldRowsStaged(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, records string
		want          [][]string // reject rows after the header, with records.csv for the path
		stored        []seqRow
	}{{
		name:    "invalid row further on",
		records: "c1,r1,5\nc1,r1,006\nc2,r1,7\nc1,r2,x\nc1,r3,0009\n",
		want: [][]string{
			{"records.csv", "3", `record_id "r1" of contract c1 has amount_minor 6 here but 5 on line 2`, "c1,r1,006"},
			{"records.csv", "5", `amount_minor "x" is not an integer`, "c1,r2,x"},
		},
		stored: []seqRow{{"c1", "r1", 1, 5}, {"c1", "r3", 2, 9}, {"c2", "r1", 1, 7}},
	}, {
		name:    "repeated record id",
		records: "c2,r1,7\nc1,r1,5\nc1,r2,08\nc1,r2,009\nc1,r1,5\n",
		want: [][]string{
			{"records.csv", "5", `record_id "r2" of contract c1 has amount_minor 9 here but 8 on line 4`, "c1,r2,009"},
		},
		stored: []seqRow{{"c1", "r1", 1, 5}, {"c1", "r2", 2, 8}, {"c2", "r1", 1, 7}},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDB(t)
			mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", goodTiers)})
			dir := t.TempDir()
			records, reject := filepath.Join(dir, "records.csv"), filepath.Join(dir, "reject.csv")
			writeTo(t, records, rh+c.records)
			rep := mustLoad(t, db, Options{RecordsPath: records, SkipInvalid: true, RejectPath: reject})
			if rep.RowsRejected != int64(len(c.want)) || rep.RecordsAccepted != int64(len(c.stored)) {
				t.Fatalf("report = %+v", rep)
			}
			got := readCSV(t, reject)
			for _, r := range got[1:] {
				r[0] = filepath.Base(r[0])
			}
			if !slices.EqualFunc(got[1:], c.want, slices.Equal) {
				t.Fatalf("reject rows:\n%q\nwant:\n%q", got[1:], c.want)
			}
			if recs := storedRecords(t, db); !slices.Equal(recs, c.stored) {
				t.Fatalf("records = %+v, want %+v", recs, c.stored)
			}
		})
	}
}
