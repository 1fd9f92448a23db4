package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/pricing/pricer"
)

// priceAndPrune prices every record with a real worker and prunes the
// loads named, which must all go.
func priceAndPrune(t *testing.T, db *dbconn.DB, loads ...int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := distributor.New(db, pricer.NewStore(db, "").Processor(), distributor.Config{Name: "w", Heartbeat: 100 * time.Millisecond,
		StaleAfter: time.Second, BatchSize: 500, UntilDone: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Run(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := pricer.NewStore(db, "").PruneLoads(ctx, pricer.PruneConfig{BatchRecords: 700}, loads)
	if err != nil {
		t.Fatal(err)
	}
	for _, lp := range res {
		if lp.Outcome != pricer.PruneDone {
			t.Fatalf("prune of load %d: %+v", lp.LoadID, lp)
		}
	}
}

func queryInt(t *testing.T, db bun.IDB, q string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRowContext(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// prunedFixture loads two contracts' records, prices and prunes them: acme
// has "a1" and "a2" (6000 each) and "r0".."r2999" but those with i%7 == 3
// (gaps inside every chunk), beta has "a1" (5). It returns the records
// pruned, by contract and id, with their amounts.
func prunedFixture(t *testing.T, db *dbconn.DB) map[string]int64 {
	t.Helper()
	mustLoad(t, db.DB, Options{TiersPath: writeFile(t, "tiers.csv", "contract_id,threshold_minor,discount_bp\nacme,0,0\nacme,10000,500\nbeta,0,0\n")})
	var b strings.Builder
	b.WriteString("contract_id,record_id,amount_minor\nacme,a1,6000\nacme,a2,6000\nbeta,a1,5\n")
	pruned := map[string]int64{"acme/a1": 6000, "acme/a2": 6000, "beta/a1": 5}
	for i := range 3000 {
		if i%7 != 3 {
			fmt.Fprintf(&b, "acme,r%d,%d\n", i, 1+i%997)
			pruned[fmt.Sprintf("acme/r%d", i)] = int64(1 + i%997)
		}
	}
	rep := mustLoad(t, db.DB, Options{RecordsPath: writeFile(t, "first.csv", b.String())})
	if rep.RecordsAccepted != int64(len(pruned)) {
		t.Fatalf("first load accepted %d, want %d", rep.RecordsAccepted, len(pruned))
	}
	priceAndPrune(t, db, rep.LoadID)
	if n := queryInt(t, db, `SELECT count(*) FROM baton.records`); n != 0 {
		t.Fatalf("%d records left after pruning", n)
	}
	return pruned
}

// A record delivered again after its load was pruned is a re-delivery
// (same amount: skipped, counted) or an error (another amount: the load
// fails whole, naming the file, the line and the pruned load), on the
// direct copy and on the staged path; ids the pruned load did not have,
// the gaps between its ids among them, load as new records numbered after
// the pruned ones.
func TestRedeliveryAfterPrune(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		staged bool
		amend  bool
		key    func(contractID, recordID string) uint64
	}{
		{name: "direct"},
		{name: "staged", staged: true},
		{name: "amend", amend: true},
		// Every record id has the same key: the key set finds every row a
		// repeat candidate, and only SQL's exact comparison of the ids
		// tells the new ones from the pruned ones.
		{name: "colliding keys", key: func(string, string) uint64 { return 42 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
			pruned := prunedFixture(t, db)
			opts := func(path string) Options {
				return Options{RecordsPath: path, staged: tc.staged, Amend: tc.amend, recordKey: tc.key}
			}

			// Every pruned record again, in another order, beside the ids
			// of the gaps, ids that extend pruned ones, one id repeated
			// within the file, and beta's a1 (which acme has too).
			var b strings.Builder
			b.WriteString("contract_id,record_id,amount_minor\n")
			var newIDs []string
			for i := 2999; i >= 0; i-- {
				if i%7 == 3 {
					fmt.Fprintf(&b, "acme,r%d,77\n", i)
					newIDs = append(newIDs, fmt.Sprintf("r%d", i))
				} else {
					fmt.Fprintf(&b, "acme,r%d,%d\n", i, 1+i%997)
				}
			}
			b.WriteString("acme,a1,6000\nacme,a2,6000\nbeta,a1,5\nacme,a10,6000\nacme,r29990,1\nacme,a1,6000\nbeta,a2,6000\n")
			newIDs = append(newIDs, "a10", "r29990")
			rep, err := load(context.Background(), db.DB, opts(writeFile(t, "again.csv", b.String())))
			if err != nil {
				t.Fatal(err)
			}
			wantRedelivered := int64(len(pruned)) + 1 // and the second acme,a1 of the file
			if rep.RecordsAccepted != int64(len(newIDs))+1 || rep.RecordsRedelivered != wantRedelivered {
				t.Fatalf("re-delivery after prune: %d accepted, %d re-delivered; want %d and %d",
					rep.RecordsAccepted, rep.RecordsRedelivered, len(newIDs)+1, wantRedelivered)
			}
			if tc.key == nil && !tc.staged && !tc.amend && !rep.DirectCopy {
				t.Fatalf("the direct copy gave way: %s", rep.gaveWay)
			}
			var got []string
			prunedAcme := queryInt(t, db, `SELECT last_seq FROM baton.pruned_totals WHERE contract_id = 'acme'`)
			for i, r := range storedRecords(t, db.DB) {
				got = append(got, r.Contract+"/"+r.RecordID)
				if r.Contract == "acme" && r.Seq != prunedAcme+int64(i)+1 {
					t.Errorf("acme's new record %s has seq %d, want %d", r.RecordID, r.Seq, prunedAcme+int64(i)+1)
				}
			}
			var want []string
			for _, id := range newIDs {
				want = append(want, "acme/"+id)
			}
			want = append(want, "beta/a2")
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Fatalf("stored after the re-delivery:\n got %v\nwant %v", got, want)
			}

			// A pruned id with another amount: refused, with the line, and
			// nothing of the file is loaded.
			before := tableCounts(t, db.DB)
			loads := queryInt(t, db, `SELECT count(*) FROM baton.loads`)
			path := writeFile(t, "changed.csv", "contract_id,record_id,amount_minor\nacme,brand-new,10\nacme,r1000,1\nbeta,a1,5\n")
			_, err = load(context.Background(), db.DB, opts(path))
			var ie *InvalidInputError
			if !errors.As(err, &ie) || ie.Total != 1 {
				t.Fatalf("a pruned id with another amount: %v", err)
			}
			msg := ie.Errors[0].Error()
			for _, want := range []string{
				path + `:3: record_id "r1000" of contract acme has amount_minor 1, but load 2 (`,
				fmt.Sprintf("accepted it with amount_minor %d and it has been pruned since (worker prune); a pruned record cannot be amended", pruned["acme/r1000"]),
			} {
				if !strings.Contains(msg, want) {
					t.Fatalf("error %q\nwants %q", msg, want)
				}
			}
			if after := tableCounts(t, db.DB); after != before {
				t.Fatalf("a refused load changed the tables: %+v, was %+v", after, before)
			}
			if n := queryInt(t, db, `SELECT count(*) FROM baton.loads`); n != loads {
				t.Fatalf("a refused load left a loads row: %d, was %d", n, loads)
			}
		})
	}
}

// What pruning keeps is exactly what was stored: every record's contract,
// seq, id, amount and load, chunk by chunk, through partial chunks and the
// gaps in the ids.
func TestPrunedChunksKeepRecordsExactly(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	mustLoad(t, db.DB, Options{TiersPath: writeFile(t, "tiers.csv", "contract_id,threshold_minor,discount_bp\nacme,0,0\nbeta,0,0\n")})
	var b strings.Builder
	b.WriteString("contract_id,record_id,amount_minor\n")
	for i := range 2500 {
		if i%11 != 5 {
			fmt.Fprintf(&b, "acme,\"id %d, \"\"x\"\"\",%d\n", i, 1000000000000-int64(i))
		}
		if i%3 == 0 {
			fmt.Fprintf(&b, "beta,é%d,%d\n", i*1000, 1+i)
		}
	}
	rep := mustLoad(t, db.DB, Options{RecordsPath: writeFile(t, "r.csv", b.String())})
	const q = `SELECT string_agg(format('%s|%s|%s|%s|%s', contract_id, seq, record_id, amount_minor, load_id), E'\n' ORDER BY contract_id, seq) FROM baton.`
	var before, after string
	if err := db.QueryRow(q + "records").Scan(&before); err != nil {
		t.Fatal(err)
	}
	priceAndPrune(t, db, rep.LoadID)
	if err := db.QueryRow(q + "pruned_records").Scan(&after); err != nil {
		t.Fatal(err)
	}
	if strings.Count(before, "\n")+1 != int(rep.RecordsAccepted) || after != before {
		t.Fatalf("pruned_records differs from the records pruned (%d records)", rep.RecordsAccepted)
	}
	if n := queryInt(t, db, `SELECT count(*) FROM baton.pruned_chunks`); n != queryInt(t, db, `SELECT sum(ceil(n / 1024.0))::bigint FROM (SELECT count(*) AS n FROM baton.pruned_records GROUP BY contract_id) c`) {
		t.Fatalf("%d pruned chunks, not the loaded chunks", n)
	}

	// An insert through the records view refuses a pruned id too.
	_, err := db.Exec(`INSERT INTO baton.records (contract_id, seq, record_id, amount_minor, load_id) VALUES ('beta', 835, 'é0', 1, 1)`)
	if err == nil || !strings.Contains(err.Error(), "already had record id é0 (pruned)") {
		t.Fatalf("insert of a pruned id through the records view: %v", err)
	}
}
