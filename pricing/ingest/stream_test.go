package ingest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/internal/pgtest"
)

// streamBudget is a memory budget far smaller than the test files: the
// open chunks may hold 24 KiB, about 1,500 records of these files.
const streamBudget = 64 << 10

// bigFile writes n records over contracts k0..k(contracts-1): grouped
// (each contract's records together) or interleaved (one of each in
// turn). Record ids are "<prefix><i>" with i the record's rank in its
// contract, amounts i+1. It returns the content without the header.
func bigFile(prefix string, contracts, per int, grouped bool) string {
	var b strings.Builder
	row := func(c, i int) { fmt.Fprintf(&b, "k%d,%s%d,%d\n", c, prefix, i, i+1) }
	if grouped {
		for c := range contracts {
			for i := range per {
				row(c, i)
			}
		}
	} else {
		for i := range per {
			for c := range contracts {
				row(c, i)
			}
		}
	}
	return b.String()
}

func kTiers(contracts int) string {
	var b strings.Builder
	b.WriteString(th)
	for c := range contracts {
		fmt.Fprintf(&b, "k%d,0,0\n", c)
	}
	return b.String()
}

// checkChunks checks the chunk layout of every contract: chunks of up to
// ChunkSize records, each of one load, whose seqs follow on from one
// another from 1 on, and each load's records of a contract in one run. It
// returns the number of chunks.
func checkChunks(t *testing.T, db *bun.DB) int {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), `SELECT contract_id, first_seq, last_seq, load_id, cardinality(record_ids), cardinality(amounts)
		FROM baton.record_chunks ORDER BY contract_id, first_seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var (
		n, last, lastLoad int64
		prev              string
		loadsSeen         = map[string]bool{}
	)
	chunks := 0
	for rows.Next() {
		var c string
		var first, lastSeq, load, ids, amounts int64
		if err := rows.Scan(&c, &first, &lastSeq, &load, &ids, &amounts); err != nil {
			t.Fatal(err)
		}
		chunks++
		if c != prev {
			prev, last, lastLoad = c, 0, 0
		}
		if first != last+1 || lastSeq-first+1 != ids || ids != amounts || ids > ChunkSize {
			t.Fatalf("chunk %s [%d, %d] of load %d with %d ids, %d amounts after seq %d", c, first, lastSeq, load, ids, amounts, last)
		}
		if load != lastLoad {
			key := fmt.Sprint(c, "/", load)
			if loadsSeen[key] {
				t.Fatalf("contract %s has records of load %d on both sides of another load's", c, load)
			}
			loadsSeen[key] = true
		}
		last, lastLoad = lastSeq, load
		n += ids
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return chunks
}

// A file many times the memory budget takes the direct copy whether its
// contracts are interleaved or grouped: every record gets its seq (after
// those stored before, in file order), chunks are partial where the budget
// forced them out, and the chunk layout holds.
func TestStreamOverBudget(t *testing.T) {
	t.Parallel()
	const contracts, per = 40, 700 // 28,000 records, about 500 KB
	for _, grouped := range []bool{false, true} {
		t.Run(fmt.Sprintf("grouped=%v", grouped), func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDB(t)
			// Some contracts have records already.
			mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", kTiers(contracts)),
				RecordsPath: writeFile(t, "r0.csv", rh+bigFile("old", contracts/4, 3, grouped))})
			rep := mustLoad(t, db, Options{RecordsPath: writeFile(t, "r.csv", rh+bigFile("n", contracts, per, grouped)), budget: streamBudget})
			if !rep.DirectCopy || rep.RecordsAccepted != contracts*per || rep.RecordsRedelivered != 0 {
				t.Fatalf("report = %+v (gave way: %q)", rep, rep.gaveWay)
			}
			chunks := checkChunks(t, db)
			// A budget for all would write one chunk per contract and load.
			if min := contracts + contracts/4; grouped && chunks != min || !grouped && chunks <= 2*min {
				t.Fatalf("%d chunks (grouped: %v)", chunks, grouped)
			}
			for _, r := range storedRecords(t, db) {
				checkOldAndNew(t, r, contracts)
			}
			if c := tableCounts(t, db); c.Records != contracts*per+contracts/4*3 || c.Available != c.Records {
				t.Fatalf("tables: %+v", c)
			}
		})
	}
}

// Re-deliveries found only after the budget forced chunks out (a record of
// the file repeated at its end, a stored record repeated in its middle)
// are skipped and counted: the direct copy removes them from the chunks it
// wrote, and the records after them move up. The record keys fit in
// memory, or are written in buckets to a temporary file (and split again
// when a bucket outgrows the budget); without that file the direct copy
// gives way and the staged path finds the same.
func TestStreamRedeliveryAfterFlush(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		budget     int64
		noTempFile bool
		direct     bool
	}{
		{"keys in memory", 2 << 20, false, true},
		{"keys in buckets", streamBudget, false, true},
		{"keys in buckets split again", 16 << 10, false, true},
		{"no temporary file", streamBudget, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			testStreamRedeliveryAfterFlush(t, c.budget, c.noTempFile, c.direct)
		})
	}
}

func testStreamRedeliveryAfterFlush(t *testing.T, budget int64, noTempFile, direct bool) {
	const contracts, per = 30, 500
	db := pgtest.NewDB(t)
	mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", kTiers(contracts)),
		RecordsPath: writeFile(t, "r0.csv", rh+"k7,stored,42\n")})
	body := bigFile("n", contracts, per, false)
	lines := strings.SplitAfter(body, "\n")
	mid := len(lines) / 2
	file := rh + strings.Join(lines[:mid], "") + "k7,stored,42\n" + strings.Join(lines[mid:], "") + "k3,n0,1\n"
	rep := mustLoad(t, db, Options{RecordsPath: writeFile(t, "r.csv", file), budget: budget, noTempFile: noTempFile})
	if rep.DirectCopy != direct || rep.RecordsAccepted != contracts*per || rep.RecordsRedelivered != 2 {
		t.Fatalf("report = %+v (gave way: %q)", rep, rep.gaveWay)
	}
	if direct && rep.keysPeak > budget*13/16 {
		t.Fatalf("the key set held %d bytes, more than 13/16 of the budget of %d", rep.keysPeak, budget)
	}
	checkChunks(t, db)
	got := map[string][]string{}
	for _, r := range storedRecords(t, db) {
		got[r.Contract] = append(got[r.Contract], r.RecordID)
	}
	for c := range contracts {
		var want []string
		if c == 7 {
			want = append(want, "stored")
		}
		for i := range per {
			want = append(want, fmt.Sprintf("n%d", i))
		}
		if id := fmt.Sprintf("k%d", c); !slices.Equal(got[id], want) {
			t.Fatalf("records of %s in seq order: %v, want %v", id, got[id], want)
		}
	}
	if c := tableCounts(t, db); c.Records != contracts*per+1 || c.Available != c.Records {
		t.Fatalf("tables: %+v", c)
	}
	var accepted, redelivered int64
	if err := db.QueryRowContext(context.Background(), "SELECT records_accepted, records_redelivered FROM baton.loads WHERE load_id = ?",
		rep.LoadID).Scan(&accepted, &redelivered); err != nil || accepted != contracts*per || redelivered != 2 {
		t.Fatalf("loads row: %d accepted, %d re-delivered, %v", accepted, redelivered, err)
	}
}

// A record id repeated with another amount far from its first occurrence,
// in a file many times the budget, fails the load with both lines named,
// and nothing is loaded.
func TestStreamRepeatOtherAmountFarApart(t *testing.T) {
	t.Parallel()
	const contracts, per = 30, 500
	db := pgtest.NewDB(t)
	mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", kTiers(contracts))})
	body := bigFile("n", contracts, per, false)
	// k5's first record (line 7) comes again at the end with amount 99.
	path := writeFile(t, "r.csv", rh+body+"k5,n0,99\n")
	_, err := load(context.Background(), db, Options{RecordsPath: path, budget: streamBudget})
	want := fmt.Sprintf(`%s:%d: record_id "n0" of contract k5 has amount_minor 99 here but 1 on line 7 (nothing was loaded)`, path, contracts*per+2)
	if err == nil || err.Error() != want {
		t.Fatalf("Load = %v\nwant %s", err, want)
	}
	if c := tableCounts(t, db); c.Records != 0 || c.Available != 0 {
		t.Fatalf("tables after failed load: %+v", c)
	}
}

// A load that fails after the stream wrote chunks (a CSV record that never
// ends, far into the file; an invalid row in an all-or-nothing load) leaves
// nothing: no records, no loads row, no work announced.
func TestStreamFailureLeavesNothing(t *testing.T) {
	t.Parallel()
	const contracts, per = 30, 500
	body := bigFile("n", contracts, per, true)
	for _, c := range []struct{ name, tail, want string }{
		{"unclosed quote", "k1,\"open,1\n" + strings.Repeat("k1,x,1\n", 200_000), "no CSV record ends within 1048576 bytes"},
		{"invalid row", "k1,late,0\n", ":15002: amount_minor 0 is out of range"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDB(t)
			mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", kTiers(contracts)), RecordsPath: writeFile(t, "r0.csv", rh+"k1,first,1\n")})
			before := tableCounts(t, db)
			_, err := load(context.Background(), db, Options{RecordsPath: writeFile(t, "r.csv", rh+body+c.tail), budget: streamBudget})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Load = %v, want %q", err, c.want)
			}
			if after := tableCounts(t, db); after != before {
				t.Fatalf("tables %+v after the failed load, %+v before", after, before)
			}
			var loads int
			if err := db.QueryRowContext(context.Background(), "SELECT count(*) FROM baton.loads").Scan(&loads); err != nil || loads != 1 {
				t.Fatalf("loads rows = %d, %v; want 1 (the first load)", loads, err)
			}
		})
	}
}

// With SkipInvalid the rows rejected on their own are kept beside the
// stream and written to the reject file; the valid rows around them are
// numbered as if they were not there.
func TestStreamSkipInvalid(t *testing.T) {
	t.Parallel()
	const contracts, per = 20, 300
	db := pgtest.NewDB(t)
	mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", kTiers(contracts))})
	r := rand.New(rand.NewPCG(1, 2))
	lines := strings.SplitAfter(bigFile("n", contracts, per, false), "\n")
	lines = lines[:len(lines)-1]
	var b strings.Builder
	b.WriteString(rh)
	var want [][]string
	for i, l := range lines {
		if r.IntN(500) == 0 {
			fmt.Fprintf(&b, "k%d,bad%d,-3\n", i%contracts, i)
			want = append(want, []string{"r.csv", fmt.Sprint(i + len(want) + 2), "amount_minor -3 is out of range (must be 1 to 1000000000000)", fmt.Sprintf("k%d,bad%d,-3", i%contracts, i)})
		}
		b.WriteString(l)
	}
	dir := t.TempDir()
	path, reject := filepath.Join(dir, "r.csv"), filepath.Join(dir, "reject.csv")
	writeTo(t, path, b.String())
	rep := mustLoad(t, db, Options{RecordsPath: path, SkipInvalid: true, RejectPath: reject, budget: 256 << 10})
	if !rep.DirectCopy || rep.RecordsAccepted != contracts*per || rep.RowsRejected != int64(len(want)) || len(want) == 0 {
		t.Fatalf("report = %+v (gave way: %q), %d rejected rows written", rep, rep.gaveWay, len(want))
	}
	got := readCSV(t, reject)[1:]
	for _, r := range got {
		r[0] = filepath.Base(r[0])
	}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("reject rows:\n%q\nwant:\n%q", got, want)
	}
	checkChunks(t, db)
	for _, r := range storedRecords(t, db) {
		var i int
		fmt.Sscanf(r.RecordID, "n%d", &i)
		if r.Seq != int64(i+1) {
			t.Fatalf("record %+v, want seq %d", r, i+1)
		}
	}
}

// A file grouped by contract keeps whole chunks however the reads of new
// contracts' bases fall: every chunk of a contract is full but its last.
func TestStreamGroupedWholeChunks(t *testing.T) {
	t.Parallel()
	const contracts, per = 6, 6000
	db := pgtest.NewDB(t)
	mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", kTiers(contracts))})
	rep := mustLoad(t, db, Options{RecordsPath: writeFile(t, "r.csv", rh+bigFile("n", contracts, per, true)), budget: 1 << 20})
	if !rep.DirectCopy || rep.RecordsAccepted != contracts*per {
		t.Fatalf("report = %+v (gave way: %q)", rep, rep.gaveWay)
	}
	checkChunks(t, db)
	rows, err := db.QueryContext(context.Background(), `SELECT contract_id, array_agg(cardinality(record_ids) ORDER BY first_seq)::text
		FROM baton.record_chunks GROUP BY contract_id ORDER BY contract_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var c, sizes string
		if err := rows.Scan(&c, &sizes); err != nil {
			t.Fatal(err)
		}
		if sizes != "{1024,1024,1024,1024,1024,880}" {
			t.Errorf("chunks of %s hold %s records, want {1024,1024,1024,1024,1024,880}", c, sizes)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// Two different record ids of a contract whose 64-bit keys are equal are
// no repeat: the exact check in SQL tells them apart, in the file and
// against a stored record, and both are stored. A true repeat among them
// is still found. Records of one key past the budget's reach make the
// direct copy give way, and the staged path stores the same.
func TestStreamKeyCollision(t *testing.T) {
	t.Parallel()
	collide := func(contractID, recordID string) uint64 {
		if strings.HasPrefix(recordID, "x") {
			return 7 // every "x..." record id of every contract
		}
		return uint64(len(contractID))<<32 | uint64(len(recordID)) ^ 0x9e3779b97f4a7c15*uint64(recordID[len(recordID)-1])
	}
	db := pgtest.NewDB(t)
	mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", kTiers(3)), RecordsPath: writeFile(t, "r0.csv", rh+"k1,xstored,5\n")})
	rep := mustLoad(t, db, Options{RecordsPath: writeFile(t, "r1.csv", rh+"k1,xa,1\nk2,xa,1\nk1,xb,2\nk0,plain,3\n"), recordKey: collide})
	if !rep.DirectCopy || rep.RecordsAccepted != 4 || rep.RecordsRedelivered != 0 {
		t.Fatalf("colliding keys: report = %+v (gave way: %q)", rep, rep.gaveWay)
	}
	rep = mustLoad(t, db, Options{RecordsPath: writeFile(t, "r2.csv", rh+"k1,xc,1\nk1,xa,1\nk1,xstored,5\nk2,xd,4\n"), recordKey: collide})
	if !rep.DirectCopy || rep.RecordsAccepted != 2 || rep.RecordsRedelivered != 2 {
		t.Fatalf("colliding keys with repeats: report = %+v (gave way: %q)", rep, rep.gaveWay)
	}
	var ids []string
	for _, r := range storedRecords(t, db) {
		ids = append(ids, fmt.Sprintf("%s/%d/%s", r.Contract, r.Seq, r.RecordID))
	}
	want := []string{"k0/1/plain", "k1/1/xstored", "k1/2/xa", "k1/3/xb", "k1/4/xc", "k2/1/xa", "k2/2/xd"}
	if !slices.Equal(ids, want) {
		t.Fatalf("records %v, want %v", ids, want)
	}
	// Thousands of different ids of one key, more than a bucket of the
	// budget holds: no bits of the key split them.
	var b strings.Builder
	b.WriteString(rh)
	for i := range 5000 {
		fmt.Fprintf(&b, "k2,x%d,1\n", i)
	}
	rep = mustLoad(t, db, Options{RecordsPath: writeFile(t, "r3.csv", b.String()), recordKey: collide, budget: streamBudget})
	if rep.DirectCopy || rep.RecordsAccepted != 5000 || rep.RecordsRedelivered != 0 {
		t.Fatalf("one key for all: report = %+v (gave way: %q)", rep, rep.gaveWay)
	}
}

// A file whose keys take several times the memory budget is loaded by the
// direct copy with the key set within its share of the budget, and a
// record repeated from an earlier load at the file's end, and one of its
// own first rows repeated at its end, are both found.
func TestStreamKeysOverBudget(t *testing.T) {
	t.Parallel()
	const contracts, per = 50, 1000 // 50,000 keys, 800 KB of them
	db := pgtest.NewDB(t)
	mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", kTiers(contracts)), RecordsPath: writeFile(t, "r0.csv", rh+bigFile("old", contracts, 20, false))})
	file := rh + bigFile("n", contracts, per, false) + "k3,n0,1\nk11,old19,20\n"
	const budget = 128 << 10
	rep := mustLoad(t, db, Options{RecordsPath: writeFile(t, "r.csv", file), budget: budget})
	if !rep.DirectCopy || rep.RecordsAccepted != contracts*per || rep.RecordsRedelivered != 2 {
		t.Fatalf("report = %+v (gave way: %q)", rep, rep.gaveWay)
	}
	if rep.keysPeak > budget*13/16 || rep.keysPeak < budget/8 {
		t.Fatalf("the key set held %d bytes of a budget of %d", rep.keysPeak, budget)
	}
	checkChunks(t, db)
	if c := tableCounts(t, db); c.Records != contracts*(per+20) || c.Available != c.Records {
		t.Fatalf("tables: %+v", c)
	}
}

// Many contracts interleaved in a file many times the smallest memory
// budget still get whole chunks: the open chunks that do not fit go to
// the spill files and are read back after the file, each contract's
// records in file order. Every chunk is full but each contract's last,
// the records view gives every record its seq (after the stored ones) and
// amount, and the open chunks stayed within their share of the budget.
func TestStreamInterleavedWholeChunks(t *testing.T) {
	t.Parallel()
	const contracts, per = 48, 2100 // 100,800 records, about 1.5 MB
	db := pgtest.NewDB(t)
	// Some contracts have records already.
	mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", kTiers(contracts)),
		RecordsPath: writeFile(t, "r0.csv", rh+bigFile("old", contracts/4, 3, false))})
	const budget = 1 << 20
	rep := mustLoad(t, db, Options{RecordsPath: writeFile(t, "r.csv", rh+bigFile("n", contracts, per, false)), MemoryLimit: budget})
	if !rep.DirectCopy || rep.RecordsAccepted != contracts*per || rep.RecordsRedelivered != 0 {
		t.Fatalf("report = %+v (gave way: %q)", rep, rep.gaveWay)
	}
	if rep.spilled == 0 {
		t.Fatal("nothing was spilled: the file fits in the budget, make it larger")
	}
	if rep.heldPeak > budget*heldShare/8+64<<10 {
		t.Fatalf("open chunks held %d bytes, more than their share of %d", rep.heldPeak, budget*heldShare/8)
	}
	checkChunks(t, db)
	rows, err := db.QueryContext(context.Background(), `SELECT contract_id, array_agg(cardinality(record_ids) ORDER BY first_seq)::text
		FROM baton.record_chunks WHERE load_id = ? GROUP BY contract_id ORDER BY contract_id`, rep.LoadID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var c, sizes string
		if err := rows.Scan(&c, &sizes); err != nil {
			t.Fatal(err)
		}
		if n++; sizes != "{1024,1024,52}" {
			t.Errorf("chunks of %s hold %s records, want {1024,1024,52}", c, sizes)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != contracts {
		t.Fatalf("chunks of %d contracts, want %d", n, contracts)
	}
	got := storedRecords(t, db)
	if len(got) != contracts*per+contracts/4*3 {
		t.Fatalf("%d records", len(got))
	}
	for _, r := range got {
		checkOldAndNew(t, r, contracts)
	}
}

// checkOldAndNew checks a record of the files bigFile("old", contracts/4,
// 3, ...) then bigFile("n", contracts, ...) loaded in that order: old
// records first in their contract, the new ones after them, each with its
// amount.
func checkOldAndNew(t *testing.T, r seqRow, contracts int) {
	t.Helper()
	var c, i int
	fmt.Sscanf(r.Contract, "k%d", &c)
	if strings.HasPrefix(r.RecordID, "old") {
		fmt.Sscanf(r.RecordID, "old%d", &i)
		if r.Seq != int64(i+1) || r.Amount != int64(i+1) {
			t.Fatalf("record %+v", r)
		}
		return
	}
	fmt.Sscanf(r.RecordID, "n%d", &i)
	want := int64(i + 1)
	if c < contracts/4 {
		want += 3
	}
	if r.Seq != want || r.Amount != int64(i+1) {
		t.Fatalf("record %+v, want seq %d", r, want)
	}
}
