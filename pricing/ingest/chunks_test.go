package ingest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/batonhq/baton/internal/pgtest"
)

type chunkRow struct {
	Contract        string
	First, Last, ID int64 // ID: load_id
	N               int   // elements in each array
}

// A load cuts each contract's new records into chunks of ChunkSize from
// its first new seq on, never across contracts or loads; a later load
// starts new chunks. Read back through the records view, every record has
// its seq, in file order, on both the direct and the staged path.
func TestChunkBoundaries(t *testing.T) {
	t.Parallel()
	for _, staged := range []bool{false, true} {
		t.Run(fmt.Sprintf("staged=%v", staged), func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDB(t)
			ctx := context.Background()
			mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", goodTiers)})
			c1n := 0 // c1's amounts count its records
			load := func(name string, c1, c2 int) {
				var b strings.Builder
				b.WriteString(rh)
				for i := range max(c1, c2) {
					if i < c1 {
						c1n++
						fmt.Fprintf(&b, "c1,%s-%d,%d\n", name, i, c1n)
					}
					if i < c2 {
						fmt.Fprintf(&b, "c2,%s-%d,%d\n", name, i, i+1)
					}
				}
				rep := mustLoad(t, db, Options{RecordsPath: writeFile(t, name+".csv", b.String()), staged: staged})
				if rep.DirectCopy == staged || rep.RecordsAccepted != int64(c1+c2) {
					t.Fatalf("load %s: report = %+v", name, rep)
				}
			}
			load("a", 2*ChunkSize+1, ChunkSize)
			load("b", ChunkSize-1, 1)
			load("c", 2, 0)

			rows, err := db.QueryContext(ctx, `SELECT contract_id, first_seq, last_seq, load_id, cardinality(record_ids)
				FROM baton.record_chunks ORDER BY contract_id, first_seq`)
			if err != nil {
				t.Fatal(err)
			}
			var got []chunkRow
			for rows.Next() {
				var c chunkRow
				if err := rows.Scan(&c.Contract, &c.First, &c.Last, &c.ID, &c.N); err != nil {
					t.Fatal(err)
				}
				got = append(got, c)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			const k = ChunkSize
			wantChunks := []chunkRow{
				{"c1", 1, k, 2, k}, {"c1", k + 1, 2 * k, 2, k}, {"c1", 2*k + 1, 2*k + 1, 2, 1},
				{"c1", 2*k + 2, 3 * k, 3, k - 1}, {"c1", 3*k + 1, 3*k + 2, 4, 2},
				{"c2", 1, k, 2, k}, {"c2", k + 1, k + 1, 3, 1},
			}
			if !slices.Equal(got, wantChunks) {
				t.Fatalf("chunks:\n%+v\nwant\n%+v", got, wantChunks)
			}

			// Through the view: each contract's records in file order, one
			// load after another, with dense seqs.
			recs := storedRecords(t, db)
			var c1, c2 int64
			for _, r := range recs {
				var name string
				var i int
				if _, err := fmt.Sscanf(strings.Replace(r.RecordID, "-", " ", 1), "%s %d", &name, &i); err != nil {
					t.Fatalf("record %+v: %v", r, err)
				}
				switch r.Contract {
				case "c1":
					c1++
					if r.Seq != c1 || r.Amount != c1 {
						t.Fatalf("record %+v, want seq and amount %d", r, c1)
					}
				case "c2":
					c2++
					if r.Seq != c2 || r.Amount != int64(i+1) {
						t.Fatalf("record %+v, want seq %d", r, c2)
					}
				}
			}
			if c1 != 3*ChunkSize+2 || c2 != ChunkSize+1 {
				t.Fatalf("%d and %d records read back", c1, c2)
			}
		})
	}
}

// A record id stored by an earlier load is found by the direct copy's
// check against the contract's stored chunks: a re-delivery is skipped and
// counted (the direct copy removes it again), another amount hands the
// load to the staged path, whose error names both loads, as before.
func TestDirectCopyRepeatsStoredRecord(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	first := writeFile(t, "r1.csv", rh+"c1,a,5\nc1,b,6\n")
	mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", goodTiers), RecordsPath: first})

	rep := mustLoad(t, db, Options{RecordsPath: writeFile(t, "r2.csv", rh+"c2,a,1\nc1,c,7\nc1,b,6\n")})
	if !rep.DirectCopy || rep.RecordsAccepted != 2 || rep.RecordsRedelivered != 1 {
		t.Fatalf("re-delivery: report = %+v", rep)
	}
	path := writeFile(t, "r3.csv", rh+"c1,d,8\nc1,a,9\n")
	_, err := load(context.Background(), db, Options{RecordsPath: path})
	want := path + `:3: record_id "a" of contract c1 has amount_minor 9, but load 1 (` + first + `) stored it with amount_minor 5; load the file with --amend to replace the stored amount (nothing was loaded)`
	if err == nil || err.Error() != want {
		t.Fatalf("Load = %v\nwant %s", err, want)
	}
	wantRecs := []seqRow{{"c1", "a", 1, 5}, {"c1", "b", 2, 6}, {"c1", "c", 3, 7}, {"c2", "a", 1, 1}}
	if recs := storedRecords(t, db); !slices.Equal(recs, wantRecs) {
		t.Fatalf("records = %+v, want %+v", recs, wantRecs)
	}
	// A contract with records stored and none repeated takes the direct copy.
	rep = mustLoad(t, db, Options{RecordsPath: writeFile(t, "r4.csv", rh+"c1,e,1\nc2,b,2\n")})
	if !rep.DirectCopy || rep.RecordsAccepted != 2 {
		t.Fatalf("no repeat: report = %+v", rep)
	}
}

// The stored record ids are read into the key set as keys, not held as
// ids: with a small budget the key set finds the one true repeat, and the
// exact check in SQL settles it.
func TestDirectCopyStoredIDsSmallBudget(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	var b strings.Builder
	b.WriteString(rh)
	for i := range 100 {
		fmt.Fprintf(&b, "c1,r%d,1\n", i)
	}
	mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", goodTiers), RecordsPath: writeFile(t, "r1.csv", b.String())})
	rep := mustLoad(t, db, Options{RecordsPath: writeFile(t, "r2.csv", rh+"c1,new,2\n"), budget: 64 << 10})
	if !rep.DirectCopy || rep.RecordsAccepted != 1 {
		t.Fatalf("report = %+v, want the direct copy and one record stored", rep)
	}
	rep = mustLoad(t, db, Options{RecordsPath: writeFile(t, "r4.csv", rh+"c1,r7,1\nc1,new2,3\n"), budget: 64 << 10})
	if !rep.DirectCopy || rep.RecordsAccepted != 1 || rep.RecordsRedelivered != 1 {
		t.Fatalf("report = %+v, want a re-delivery found by the direct copy", rep)
	}
	if c := tableCounts(t, db); c.Records != 102 || c.Available != 102 {
		t.Fatalf("tables: %+v", c)
	}
	want := seqRow{"c1", "new2", 102, 3}
	if got := storedRecords(t, db); got[len(got)-1] != want {
		t.Fatalf("last record %+v, want %+v", got[len(got)-1], want)
	}
}
