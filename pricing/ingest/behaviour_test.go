package ingest

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"github.com/batonhq/baton/internal/notify"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"
	"golang.org/x/sync/errgroup"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
)

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in := filepath.Join(dir, "in.csv")
	writeTo(t, in, rh)
	for i, c := range []struct {
		opts Options
		want string // "" for valid
	}{
		{Options{}, "nothing to load"},
		{Options{TiersPath: in}, ""},
		{Options{RecordsPath: in}, ""},
		{Options{TiersPath: in, SkipInvalid: true}, "needs a reject file"},
		{Options{RecordsPath: in, RejectPath: "r.csv"}, "only written when skipping"},
		{Options{RecordsPath: in, SkipInvalid: true, RejectPath: "r.csv"}, ""},
		{Options{RecordsPath: in, SkipInvalid: true, RejectPath: in}, "also an input file"},
		{Options{RecordsPath: in, SkipInvalid: true, RejectPath: filepath.Join(dir, ".", "in.csv")}, "also an input file"},
		{Options{TiersPath: in, RecordsPath: in}, "both as the tiers and as the records file"},
		{Options{RecordsPath: in, MaxListed: -1}, "MaxListed"},
		{Options{RecordsPath: in, MemoryLimit: 1<<20 - 1}, "MemoryLimit is 1048575 bytes, want at least 1048576 (1 MiB)"},
		{Options{RecordsPath: in, MemoryLimit: -1}, "MemoryLimit is -1 bytes"},
		{Options{RecordsPath: in, MemoryLimit: 1 << 20}, ""},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			err := c.opts.validate()
			if (err == nil) != (c.want == "") || err != nil && !strings.Contains(err.Error(), c.want) {
				t.Errorf("validate(%+v) = %v, want %q", c.opts, err, c.want)
			}
		})
	}
	// Load checks options before touching the database.
	if _, err := load(context.Background(), nil, Options{}); err == nil || !strings.Contains(err.Error(), "nothing to load") {
		t.Errorf("Load with no files = %v", err)
	}
}

func TestMissingFile(t *testing.T) {
	t.Parallel()
	_, err := load(context.Background(), nil, Options{RecordsPath: filepath.Join(t.TempDir(), "missing.csv")})
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "loading records") {
		t.Fatalf("Load of a missing file = %v", err)
	}
}

// One bad record among valid tiers and records: nothing at all is loaded,
// not even the contracts, and the message lists MaxListed problems.
func TestAllOrNothing(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	var recs strings.Builder
	recs.WriteString(rh)
	for i := range 30 {
		fmt.Fprintf(&recs, "c1,r%d,%d\n", i, i) // r0 has amount 0
		fmt.Fprintf(&recs, "nope,r%d,1\n", i)
	}
	tiers := writeFile(t, "tiers.csv", goodTiers)
	records := writeFile(t, "records.csv", recs.String())
	_, err := load(context.Background(), db, Options{TiersPath: tiers, RecordsPath: records, MaxListed: 5})
	var ie *InvalidInputError
	if !errors.As(err, &ie) {
		t.Fatalf("Load = %v, want *InvalidInputError", err)
	}
	if ie.Total != 31 || len(ie.Errors) != 5 {
		t.Fatalf("Total %d, listed %d; want 31, 5", ie.Total, len(ie.Errors))
	}
	want := strings.Join([]string{
		"31 invalid rows, nothing was loaded:",
		"  " + records + ":2: amount_minor 0 is out of range (must be 1 to 1000000000000)",
		"  " + records + ":3: unknown contract nope",
		"  " + records + ":5: unknown contract nope",
		"  " + records + ":7: unknown contract nope",
		"  " + records + ":9: unknown contract nope",
		"  and 26 more (31 in total)",
	}, "\n")
	if err.Error() != want {
		t.Fatalf("message:\n%s\nwant:\n%s", err, want)
	}
	if !slices.Equal(ie.Errors[0].Row, []string{"c1", "r0", "0"}) || !slices.Equal(ie.Errors[1].Row, []string{"nope", "r0", "1"}) {
		t.Errorf("rows = %q, %q", ie.Errors[0].Row, ie.Errors[1].Row)
	}
	if c := tableCounts(t, db); c != (counts{}) {
		t.Fatalf("tables after a failed load: %+v", c)
	}
}

func readCSV(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func TestSkipInvalid(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	tiers := writeFile(t, "tiers.csv", th+
		"good,0,0\n"+ // 2
		"bad,00,0\n"+ // 3 rejected with its set
		"good,1000,0500\n"+ // 4
		"bad,x,5\n") // 5
	records := writeFile(t, "records.csv", rh+
		"good,r1,100\n"+ // 2 seq 1
		"bad,r1,100\n"+ // 3 unknown contract
		"good,r2,0\n"+ // 4 amount
		"good,\"r,3\",300\n"+ // 5 seq 2
		"good,r1,100\n"+ // 6 re-delivery
		"good,r1,101\n"+ // 7 other amount
		"good,r4\n"+ // 8 fields
		"nope,r1,5\n"+ // 9 unknown contract
		"good,\" r5\",007\n") // 10 seq 3
	reject := filepath.Join(t.TempDir(), "reject.csv")
	rep := mustLoad(t, db, Options{TiersPath: tiers, RecordsPath: records, SkipInvalid: true, RejectPath: reject})
	if rep.TierRows != 2 || rep.ContractsCreated != 1 || rep.RecordsAccepted != 3 || rep.RecordsRedelivered != 1 || rep.RowsRejected != 7 {
		t.Fatalf("report = %+v", rep)
	}
	want := [][]string{
		{"file", "line", "reason", "row"},
		{tiers, "3", "tier set of contract bad is rejected because line 5 is invalid", "bad,00,0"},
		{tiers, "5", `threshold_minor "x" is not an integer`, "bad,x,5"},
		{records, "3", "unknown contract bad (its tier set in " + tiers + " was rejected)", "bad,r1,100"},
		{records, "4", "amount_minor 0 is out of range (must be 1 to 1000000000000)", "good,r2,0"},
		{records, "7", `record_id "r1" of contract good has amount_minor 101 here but 100 on line 2`, "good,r1,101"},
		{records, "8", "has 2 fields, want 3 (contract_id,record_id,amount_minor)", "good,r4"},
		{records, "9", "unknown contract nope", "nope,r1,5"},
	}
	if got := readCSV(t, reject); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("reject file:\n%q\nwant:\n%q", got, want)
	}
	got := storedRecords(t, db)
	wantRecs := []seqRow{{"good", "r1", 1, 100}, {"good", "r,3", 2, 300}, {"good", " r5", 3, 7}}
	if !slices.Equal(got, wantRecs) {
		t.Fatalf("records = %+v, want %+v", got, wantRecs)
	}
	if c := tableCounts(t, db); c != (counts{Contracts: 1, Tiers: 2, Records: 3, Tasks: 1, Available: 3}) {
		t.Fatalf("tables: %+v", c)
	}
	var rejected int64
	if err := db.QueryRowContext(context.Background(), "SELECT rows_rejected FROM baton.loads").Scan(&rejected); err != nil || rejected != 7 {
		t.Fatalf("loads.rows_rejected = %d, %v", rejected, err)
	}
}

// A clean load with SkipInvalid writes a reject file with the header only;
// a load that fails writes none.
func TestSkipInvalidRejectFile(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	dir := t.TempDir()
	reject := filepath.Join(dir, "reject.csv")
	mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", goodTiers), SkipInvalid: true, RejectPath: reject})
	if got := readCSV(t, reject); len(got) != 1 {
		t.Fatalf("reject file of a clean load: %q", got)
	}
	reject2 := filepath.Join(dir, "reject2.csv")
	_, err := load(context.Background(), db, Options{RecordsPath: writeFile(t, "r.csv", "bad header\n"), SkipInvalid: true, RejectPath: reject2})
	var ie *InvalidInputError
	if !errors.As(err, &ie) {
		t.Fatalf("Load = %v", err)
	}
	if _, err := os.Stat(reject2); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("reject file of a failed load: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("files left in %s: %v", dir, entries)
	}
}

func TestRedeliveryWithinFile(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", goodTiers)})
	rep := mustLoad(t, db, Options{RecordsPath: writeFile(t, "r.csv", rh+"c1,r1,5\nc1,r2,6\nc2,r1,7\nc1,r1,5\nc1,r3,8\nc1,r2,6\n")})
	if rep.RecordsAccepted != 4 || rep.RecordsRedelivered != 2 {
		t.Fatalf("report = %+v", rep)
	}
	want := []seqRow{{"c1", "r1", 1, 5}, {"c1", "r2", 2, 6}, {"c1", "r3", 3, 8}, {"c2", "r1", 1, 7}}
	if got := storedRecords(t, db); !slices.Equal(got, want) {
		t.Fatalf("records = %+v, want %+v", got, want)
	}
}

func TestRedeliveryAcrossLoads(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", goodTiers), RecordsPath: writeFile(t, "r1.csv", rh+"c1,r1,5\nc1,r2,6\n")})
	rep := mustLoad(t, db, Options{RecordsPath: writeFile(t, "r2.csv", rh+"c1,r2,6\nc1,r3,7\nc1,r1,5\nc1,r3,7\n")})
	if rep.RecordsAccepted != 1 || rep.RecordsRedelivered != 3 {
		t.Fatalf("report = %+v", rep)
	}
	// A full re-delivery of a load adds nothing.
	rep = mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", goodTiers), RecordsPath: writeFile(t, "r1.csv", rh+"c1,r1,5\nc1,r2,6\n")})
	if rep.RecordsAccepted != 0 || rep.RecordsRedelivered != 2 || rep.ContractsCreated != 0 || rep.TierRows != 3 {
		t.Fatalf("report = %+v", rep)
	}
	want := []seqRow{{"c1", "r1", 1, 5}, {"c1", "r2", 2, 6}, {"c1", "r3", 3, 7}}
	if got := storedRecords(t, db); !slices.Equal(got, want) {
		t.Fatalf("records = %+v, want %+v", got, want)
	}
	if c := tableCounts(t, db); c.Available != 3 {
		t.Fatalf("available = %d, want 3", c.Available)
	}
}

func TestSameIDOtherAmountAcrossLoads(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	first := writeFile(t, "first.csv", rh+"c1,r1,5\nc1,r2,6\n")
	rep1 := mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", goodTiers), RecordsPath: first})
	second := writeFile(t, "second.csv", rh+"c1,r3,1\nc1,r2,7\n")
	_, err := load(context.Background(), db, Options{RecordsPath: second})
	want := fmt.Sprintf(`%s:3: record_id "r2" of contract c1 has amount_minor 7, but load %d (%s) stored it with amount_minor 6; load the file with --amend to replace the stored amount (nothing was loaded)`,
		second, rep1.LoadID, first)
	if err == nil || err.Error() != want {
		t.Fatalf("Load = %v\nwant %s", err, want)
	}
	if c := tableCounts(t, db); c.Records != 2 {
		t.Fatalf("records after failed load: %d", c.Records)
	}
}

func TestSecondLoadAppends(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", goodTiers), RecordsPath: writeFile(t, "r1.csv", rh+"c1,a,1\nc2,a,2\nc1,b,3\n")})
	rep := mustLoad(t, db, Options{RecordsPath: writeFile(t, "r2.csv", rh+"c2,b,4\nc1,c,5\nc1,d,6\n")})
	want := []seqRow{{"c1", "a", 1, 1}, {"c1", "b", 2, 3}, {"c1", "c", 3, 5}, {"c1", "d", 4, 6}, {"c2", "a", 1, 2}, {"c2", "b", 2, 4}}
	if got := storedRecords(t, db); !slices.Equal(got, want) {
		t.Fatalf("records = %+v, want %+v", got, want)
	}
	var loadIDs []int64
	rows, err := db.QueryContext(context.Background(), "SELECT load_id FROM baton.records WHERE contract_id = 'c1' ORDER BY seq")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		rows.Scan(&id)
		loadIDs = append(loadIDs, id)
	}
	if !slices.Equal(loadIDs, []int64{rep.LoadID - 1, rep.LoadID - 1, rep.LoadID, rep.LoadID}) {
		t.Fatalf("load ids = %v (second load %d)", loadIDs, rep.LoadID)
	}
	var avail1, avail2 int64
	if err := db.QueryRowContext(context.Background(),
		"SELECT (SELECT available FROM baton.tasks WHERE partition_key = 'c1'), (SELECT available FROM baton.tasks WHERE partition_key = 'c2')").
		Scan(&avail1, &avail2); err != nil || avail1 != 4 || avail2 != 2 {
		t.Fatalf("available = %d, %d (%v)", avail1, avail2, err)
	}
}

func TestTierChangeBeforePricing(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	mustLoad(t, db, Options{TiersPath: writeFile(t, "t1.csv", goodTiers), RecordsPath: writeFile(t, "r.csv", rh+"c1,a,1\n")})
	rep := mustLoad(t, db, Options{TiersPath: writeFile(t, "t2.csv", th+"c1,500,7\nc1,0,1\nc1,100,3\n")})
	if rep.ContractsCreated != 0 || rep.TierRows != 3 {
		t.Fatalf("report = %+v", rep)
	}
	if got := tiersOf(t, db, "c1"); got != "0:1 100:3 500:7" {
		t.Fatalf("tiers of c1 = %s", got)
	}
	if got := tiersOf(t, db, "c2"); got != "0:50" {
		t.Fatalf("tiers of c2 = %s", got)
	}
}

func TestTierChangeAfterPricing(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	mustLoad(t, db, Options{TiersPath: writeFile(t, "t1.csv", goodTiers)})
	if _, err := db.ExecContext(ctx, "UPDATE baton.tasks SET position = 1, available = 1 WHERE partition_key = 'c1'"); err != nil {
		t.Fatal(err)
	}
	before := tableCounts(t, db)
	changed := writeFile(t, "t2.csv", th+"c2,0,60\nc1,0,0\nc1,1000,200\n")
	_, err := load(ctx, db, Options{TiersPath: changed})
	var ie *InvalidInputError
	if !errors.As(err, &ie) || ie.Total != 2 ||
		ie.Errors[0].Error() != changed+":3: tiers of contract c1 cannot change: 1 of its records are already priced; load the tiers with --reprice to re-price it under them" ||
		ie.Errors[1].Error() != changed+":4: tiers of contract c1 cannot change (see line 3)" {
		t.Fatalf("Load = %v", err)
	}
	if after := tableCounts(t, db); after != before || tiersOf(t, db, "c2") != "0:50" {
		t.Fatalf("failed load changed tables: %+v, before %+v", after, before)
	}
	// An identical set, in another order, is a harmless re-delivery.
	rep := mustLoad(t, db, Options{TiersPath: writeFile(t, "t3.csv", th+"c1,1000,100\nc1,0,0\n")})
	if rep.TierRows != 2 || tiersOf(t, db, "c1") != "0:0 1000:100" {
		t.Fatalf("report %+v, tiers %s", rep, tiersOf(t, db, "c1"))
	}
	// A removed tier is a change too; with SkipInvalid the rest loads.
	reject := filepath.Join(t.TempDir(), "reject.csv")
	rep = mustLoad(t, db, Options{TiersPath: writeFile(t, "t4.csv", th+"c1,0,0\nc2,0,70\n"), SkipInvalid: true, RejectPath: reject})
	if rep.RowsRejected != 1 || tiersOf(t, db, "c1") != "0:0 1000:100" || tiersOf(t, db, "c2") != "0:70" {
		t.Fatalf("report %+v, tiers %s / %s", rep, tiersOf(t, db, "c1"), tiersOf(t, db, "c2"))
	}
}

// tiersOf returns the stored tiers of a contract as "threshold:bp ...".
func tiersOf(t *testing.T, db *bun.DB, contract string) string {
	t.Helper()
	var s string
	if err := db.QueryRowContext(context.Background(), `SELECT coalesce(string_agg(threshold_minor || ':' || discount_bp, ' '
		ORDER BY threshold_minor), '') FROM baton.tiers WHERE contract_id = ?`, contract).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// Two loads for the same contract at once: they are serialised, so seqs
// are dense and each file's records keep their order in one block.
func TestConcurrentLoads(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", goodTiers)})
	const n = 300
	files := make([]string, 4)
	for f := range files {
		var b strings.Builder
		b.WriteString(rh)
		for i := range n {
			fmt.Fprintf(&b, "c1,f%d-%04d,%d\nc2,f%d-%04d,1\n", f, i, i+1, f, i)
		}
		files[f] = writeFile(t, fmt.Sprintf("r%d.csv", f), b.String())
	}
	var g errgroup.Group
	for _, f := range files {
		g.Go(func() error {
			_, err := load(context.Background(), db, Options{RecordsPath: f})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	recs := storedRecords(t, db)
	if len(recs) != 2*n*len(files) {
		t.Fatalf("%d records, want %d", len(recs), 2*n*len(files))
	}
	seen := map[string]bool{}
	next := map[string]int64{"c1": 1, "c2": 1}
	for i, r := range recs {
		if r.Seq != next[r.Contract] {
			t.Fatalf("record %+v: seq %d, want %d", r, r.Seq, next[r.Contract])
		}
		next[r.Contract]++
		if seen[r.Contract+"/"+r.RecordID] {
			t.Fatalf("duplicate record %+v", r)
		}
		seen[r.Contract+"/"+r.RecordID] = true
		// Within a contract, each file's rows form one block in file order.
		if r.Seq%n != 1 && recs[i-1].RecordID[:3] != r.RecordID[:3] {
			t.Fatalf("records of two loads interleave at %+v", r)
		}
		if r.Seq%n != 1 && recs[i-1].RecordID > r.RecordID {
			t.Fatalf("records out of file order at %+v", r)
		}
	}
	if c := tableCounts(t, db); c.Available != int64(2*n*len(files)) {
		t.Fatalf("available = %d", c.Available)
	}
}

// Loads while something else keeps locking and updating the task rows in
// partition_key order, as heartbeats do: no deadlock, nothing lost.
func TestLoadWhileTasksAreUpdated(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var tiers strings.Builder
	tiers.WriteString(th)
	for c := range 50 {
		fmt.Fprintf(&tiers, "k%02d,0,0\n", c)
	}
	mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", tiers.String())})

	stop := make(chan struct{})
	var beats atomic.Int64
	var g errgroup.Group
	for range 2 {
		g.Go(func() error {
			for {
				select {
				case <-stop:
					return nil
				default:
				}
				_, err := db.ExecContext(ctx, `UPDATE baton.tasks SET heartbeat_at = now() WHERE partition_key IN
					(SELECT partition_key FROM baton.tasks ORDER BY partition_key FOR UPDATE)`)
				if err != nil {
					return err
				}
				beats.Add(1)
			}
		})
	}
	var loads errgroup.Group
	for f := range 4 {
		var b strings.Builder
		b.WriteString(rh)
		for i := range 500 {
			fmt.Fprintf(&b, "k%02d,f%d-%d,1\n", (i*7+f)%50, f, i)
		}
		path := writeFile(t, "r.csv", b.String())
		loads.Go(func() error {
			_, err := load(ctx, db, Options{RecordsPath: path})
			return err
		})
	}
	loadErr := loads.Wait()
	close(stop)
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if loadErr != nil {
		t.Fatal(loadErr)
	}
	var bad int64
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM baton.tasks t WHERE available <>
		(SELECT count(*) FROM baton.records r WHERE r.contract_id = t.partition_key)`).Scan(&bad); err != nil || bad != 0 {
		t.Fatalf("%d task rows with a wrong available (%v)", bad, err)
	}
	if c := tableCounts(t, db); c.Records != 2000 {
		t.Fatalf("%d records, want 2000", c.Records)
	}
	t.Logf("%d concurrent task updates", beats.Load())
}

// A load that adds records notifies notify.Channel on commit.
func TestNotify(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	db := pgtest.Open(t, url, dbconn.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	listener, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(context.Background())
	if _, err := listener.Exec(ctx, "LISTEN "+notify.Channel); err != nil {
		t.Fatal(err)
	}
	mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", goodTiers), RecordsPath: writeFile(t, "r.csv", rh+"c1,a,1\n")})
	n, err := listener.WaitForNotification(ctx)
	if err != nil || n.Channel != notify.Channel {
		t.Fatalf("notification %+v, %v", n, err)
	}
}

func TestCRLFAndBlankLines(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	tiers := writeFile(t, "t.csv", "contract_id,threshold_minor,discount_bp\r\nc1,0,0\r\n\r\nc1,10,5\r\n")
	records := writeFile(t, "r.csv", "contract_id,record_id,amount_minor\r\n\r\nc1,a,1\r\nc1,\"b,\"\"x\"\"\",2\r\nc1,c,3")
	rep := mustLoad(t, db, Options{TiersPath: tiers, RecordsPath: records})
	if rep.TierRows != 2 || rep.RecordsAccepted != 3 {
		t.Fatalf("report = %+v", rep)
	}
	want := []seqRow{{"c1", "a", 1, 1}, {"c1", `b,"x"`, 2, 2}, {"c1", "c", 3, 3}}
	if got := storedRecords(t, db); !slices.Equal(got, want) {
		t.Fatalf("records = %+v", got)
	}
	// Line numbers count the blank lines.
	_, err := load(context.Background(), db, Options{RecordsPath: writeFile(t, "r2.csv", "contract_id,record_id,amount_minor\r\n\r\n\r\nc1,z,0\r\n")})
	if err == nil || !strings.Contains(err.Error(), "r2.csv:4: amount_minor 0") {
		t.Fatalf("Load = %v", err)
	}
}

func TestLimitsAccepted(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	var tiers strings.Builder
	tiers.WriteString(th)
	for i := range MaxTiers {
		fmt.Fprintf(&tiers, "%s,%d,%d\n", strings.Repeat("C", MaxContractIDLen), 9223372036854775807-int64(i), 10000-i)
	}
	id := strings.Repeat("é", MaxRecordIDLen)
	records := rh + strings.Repeat("C", MaxContractIDLen) + "," + id + ",1000000000000\n" +
		strings.Repeat("C", MaxContractIDLen) + ",\"  ~ \"\"quoted\"\", ✓ \",1\n"
	rep := mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", tiers.String()), RecordsPath: writeFile(t, "r.csv", records)})
	if rep.TierRows != MaxTiers || rep.RecordsAccepted != 2 {
		t.Fatalf("report = %+v", rep)
	}
	got := storedRecords(t, db)
	if got[0].RecordID != id || got[1].RecordID != `  ~ "quoted", ✓ ` {
		t.Fatalf("records = %+v", got)
	}
}

// The cumulative gross counts stored records too, and only a contract
// close to the limit is checked exactly.
func TestCumulativeGrossAcrossLoads(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", goodTiers), RecordsPath: writeFile(t, "r1.csv", rh+"c1,a,60\nc2,a,60\n")})
	r2 := writeFile(t, "r2.csv", rh+"c2,b,40\nc1,b,41\nc1,a,60\n")
	_, err := load(context.Background(), db, Options{RecordsPath: r2, maxGross: 100})
	if err == nil || err.Error() != r2+":3: cumulative gross of contract c1 would exceed 100 (nothing was loaded)" {
		t.Fatalf("Load = %v", err)
	}
	rep := mustLoad(t, db, Options{RecordsPath: writeFile(t, "r3.csv", rh+"c2,b,40\nc1,b,40\nc1,a,60\n"), maxGross: 100})
	if rep.RecordsAccepted != 2 || rep.RecordsRedelivered != 1 {
		t.Fatalf("report = %+v", rep)
	}
}

// Records removed by worker prune count towards the cumulative gross as
// if they were still stored: pruning keeps the contract's totals
// (pruned_totals), and later records are priced on top of them.
func TestCumulativeGrossCountsPrunedRecords(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", goodTiers), RecordsPath: writeFile(t, "r1.csv", rh+"c1,a,60\n")})
	// What worker prune leaves of c1's priced load: its totals, no chunks.
	if _, err := db.ExecContext(context.Background(), `
		WITH d AS (DELETE FROM baton.record_chunks WHERE contract_id = 'c1')
		INSERT INTO baton.pruned_totals (contract_id, records, last_seq, gross_minor, discount_minor, net_minor)
		VALUES ('c1', 1, 1, 60, 0, 60)`); err != nil {
		t.Fatal(err)
	}
	r2 := writeFile(t, "r2.csv", rh+"c1,b,41\n")
	_, err := load(context.Background(), db, Options{RecordsPath: r2, maxGross: 100})
	if err == nil || err.Error() != r2+":2: cumulative gross of contract c1 would exceed 100 (nothing was loaded)" {
		t.Fatalf("Load = %v, want the gross limit refused counting the pruned 60", err)
	}
	if rep := mustLoad(t, db, Options{RecordsPath: writeFile(t, "r3.csv", rh+"c1,b,40\n"), maxGross: 100}); rep.RecordsAccepted != 1 {
		t.Fatalf("report = %+v", rep)
	}
}

// An unclosed quote must not read the rest of a big file into memory.
func TestUnclosedQuoteInBigFile(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString(rh + "c1,a,1\nc1,\"b,2\n")
	for b.Len() < 2*maxRecordBytes {
		b.WriteString("c1,x,1\n")
	}
	path := writeFile(t, "r.csv", b.String())
	_, err := load(context.Background(), pgtest.NewDB(t), Options{RecordsPath: path})
	want := path + ":3: no CSV record ends within 1048576 bytes from here; is a quote left open? (nothing was loaded)"
	if err == nil || err.Error() != want {
		t.Fatalf("Load = %v\nwant %s", err, want)
	}
}

func TestProgress(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	const n = 2*progressEvery + 5
	var b strings.Builder
	b.WriteString(rh)
	for i := range n {
		fmt.Fprintf(&b, "c%d,r%d,%d\n", i%2+1, i, i%1000+1)
	}
	var calls []string
	rep := mustLoad(t, db, Options{
		TiersPath:   writeFile(t, "t.csv", goodTiers),
		RecordsPath: writeFile(t, "r.csv", b.String()),
		Progress:    func(stage string, rows int64) { calls = append(calls, fmt.Sprint(stage, " ", rows)) },
	})
	if rep.RecordsAccepted != n {
		t.Fatalf("report = %+v", rep)
	}
	want := []string{"tiers 3", "records 100000", "records 200000", "records 200005",
		"validating 200008", "inserting 200008", "updating contracts 200008"}
	if !slices.Equal(calls, want) {
		t.Fatalf("progress calls %q, want %q", calls, want)
	}
}

// A load that only adds records does not wait for a batch in flight (which
// holds its task row FOR KEY SHARE, as the distributor's fence does).
func TestRecordsLoadDoesNotWaitForBatches(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", goodTiers), RecordsPath: writeFile(t, "r1.csv", rh+"c1,a,1\n")})
	batch, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer batch.Rollback()
	if _, err := batch.ExecContext(ctx, "SELECT 1 FROM baton.tasks WHERE partition_key = 'c1' FOR KEY SHARE"); err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	rep, err := load(lctx, db, Options{RecordsPath: writeFile(t, "r2.csv", rh+"c1,b,2\n")})
	if err != nil || rep.RecordsAccepted != 1 {
		t.Fatalf("Load while a batch is in flight = %+v, %v", rep, err)
	}
}

// Changing the tiers of a contract with unpriced records waits for a batch
// in flight; if that batch prices records (with the old tiers), the load
// fails instead of changing the tiers under it.
func TestTierChangeWaitsForBatchInFlight(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", goodTiers), RecordsPath: writeFile(t, "r.csv", rh+"c1,a,1\nc2,a,1\n")})
	before := tiersOf(t, db, "c1")

	batch, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer batch.Rollback()
	if _, err := batch.ExecContext(ctx, "SELECT 1 FROM baton.tasks WHERE partition_key = 'c1' FOR KEY SHARE"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := load(ctx, db, Options{TiersPath: writeFile(t, "t2.csv", th+"c1,0,9\n"), RecordsPath: writeFile(t, "r2.csv", rh+"c2,b,1\n")})
		done <- err
	}()
	pgtest.WaitForLockWait(t, db, "FOR UPDATE OF t")
	if _, err := batch.ExecContext(ctx, "UPDATE baton.tasks SET position = 1 WHERE partition_key = 'c1'"); err != nil {
		t.Fatal(err)
	}
	if err := batch.Commit(); err != nil {
		t.Fatal(err)
	}
	err = <-done
	if err == nil || !strings.Contains(err.Error(), "contract c1 had records priced while this load ran (position 1), so its tiers can no longer change") {
		t.Fatalf("Load = %v", err)
	}
	if got := tiersOf(t, db, "c1"); got != before {
		t.Fatalf("tiers of c1 = %s, want %s", got, before)
	}
	if c := tableCounts(t, db); c.Records != 2 {
		t.Fatalf("%d records after the failed load", c.Records)
	}

	// Once the batch has ended without pricing, the change goes through.
	db2 := pgtest.NewDB(t)
	mustLoad(t, db2, Options{TiersPath: writeFile(t, "t.csv", goodTiers), RecordsPath: writeFile(t, "r.csv", rh+"c1,a,1\n")})
	batch2, err := db2.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer batch2.Rollback()
	if _, err := batch2.ExecContext(ctx, "SELECT 1 FROM baton.tasks WHERE partition_key = 'c1' FOR KEY SHARE"); err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := load(ctx, db2, Options{TiersPath: writeFile(t, "t2.csv", th+"c1,0,9\n")})
		done <- err
	}()
	pgtest.WaitForLockWait(t, db2, "FOR UPDATE OF t")
	batch2.Rollback()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := tiersOf(t, db2, "c1"); got != "0:9" {
		t.Fatalf("tiers of c1 = %s", got)
	}
}

// With SkipInvalid, a tiers row that is invalid as a whole still rejects
// its contract's set when the contract can be told, and stops the load
// when it cannot (a malformed record may have swallowed other rows).
func TestSkipInvalidIncompleteTierSets(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	reject := filepath.Join(t.TempDir(), "reject.csv")
	tiers := writeFile(t, "t.csv", th+"c1,0\nc1,10,5\nc2,\"0\"x,1\nc2,5,5\nc3,0,0\n")
	rep := mustLoad(t, db, Options{TiersPath: tiers, SkipInvalid: true, RejectPath: reject})
	if rep.ContractsCreated != 1 || rep.RowsRejected != 4 || tiersOf(t, db, "c3") != "0:0" {
		t.Fatalf("report = %+v", rep)
	}
	got := readCSV(t, reject)
	want := [][]string{
		{"file", "line", "reason", "row"},
		{tiers, "2", "has 2 fields, want 3 (contract_id,threshold_minor,discount_bp)", "c1,0"},
		{tiers, "3", "tier set of contract c1 is rejected because line 2 is invalid", "c1,10,5"},
		{tiers, "4", `malformed CSV: extraneous or missing " in quoted-field (at column 6)`, ""},
		{tiers, "5", "tier set of contract c2 is rejected because line 4 is invalid", "c2,5,5"},
	}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("reject file:\n%q\nwant:\n%q", got, want)
	}

	db2 := pgtest.NewDB(t)
	tiers2 := writeFile(t, "t2.csv", th+"c1,0,0\nc2,\"0,1\nc3,0,0\nc4,0,0\n")
	_, err := load(context.Background(), db2, Options{TiersPath: tiers2, SkipInvalid: true, RejectPath: reject + "2"})
	var ie *InvalidInputError
	if !errors.As(err, &ie) || !strings.HasPrefix(err.Error(), tiers2+":3: malformed CSV") ||
		!strings.Contains(err.Error(), "cannot tell which contract this tier row belongs to") {
		t.Fatalf("Load = %v", err)
	}
	if c := tableCounts(t, db2); c != (counts{}) {
		t.Fatalf("tables after a failed load: %+v", c)
	}
}
