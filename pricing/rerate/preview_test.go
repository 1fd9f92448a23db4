package rerate_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing/export"
	"github.com/batonhq/baton/pricing/ingest"
	"github.com/batonhq/baton/pricing/pricer"
	"github.com/batonhq/baton/pricing/rerate"
)

// previewBytes is every preview's view (priced_generation under the
// preview's generation), as export writes rows, by contract and seq.
func previewBytes(t *testing.T, db *dbconn.DB) []byte {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), `
SELECT g.contract_id, r.record_id, r.gross_minor, r.discount_minor, r.net_minor
  FROM baton.generations g CROSS JOIN LATERAL baton.priced_generation(g.contract_id, g.generation) r
 WHERE g.state = 'preview' ORDER BY g.contract_id COLLATE "C", r.seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	buf := bytes.NewBufferString("contract_id,record_id,gross_minor,discount_minor,net_minor\n")
	for rows.Next() {
		var c, id string
		var g, d, n int64
		if err := rows.Scan(&c, &id, &g, &d, &n); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(buf, "%s,%s,%d,%d,%d\n", c, id, g, d, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// undiscounted is the golden output with no discount: every record's net
// is its gross.
func undiscounted(t *testing.T) []byte {
	t.Helper()
	lines := strings.Split(strings.TrimRight(string(golden(t)), "\n"), "\n")
	for i := 1; i < len(lines); i++ {
		f := strings.Split(lines[i], ",")
		f[3], f[4] = "0", f[2]
		lines[i] = strings.Join(f, ",")
	}
	return []byte(strings.Join(lines, "\n") + "\n")
}

// previewAll starts a preview of every golden contract with tiers (the
// golden ones, or with every discount 0).
func previewAll(t *testing.T, db *dbconn.DB, noDiscount bool) []rerate.Started {
	t.Helper()
	var reqs []rerate.Request
	for c, tiers := range vectorTiers(t) {
		if noDiscount {
			for i := range tiers {
				tiers[i].DiscountBP = 0
			}
		}
		reqs = append(reqs, rerate.Request{Contract: c, NewTiers: tiers, Reason: "what if", StartedBy: "test", Preview: true})
	}
	started, err := start(t, db, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range started {
		if !s.Preview || s.Generation != 2 {
			t.Fatalf("started %+v, want a preview of generation 2", s)
		}
	}
	return started
}

// previewedUndiscounted loads the golden records under tiers without
// discounts, prices them and previews the golden tiers of every contract;
// it returns the database and the first pricing's export.
func previewedUndiscounted(t *testing.T) (*dbconn.DB, []byte) {
	t.Helper()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{MaxOpenConns: 8})
	if _, err := ingest.NewStore(db, "").Load(context.Background(), ingest.Options{TiersPath: noDiscountTiers(t), RecordsPath: vectors + "records.csv"}); err != nil {
		t.Fatal(err)
	}
	runUntilDone(t, db, distributor.Config{BatchSize: 97})
	first := exportBytes(t, db)
	previewAll(t, db, false)
	return db, first
}

// linesOf is the lines of the CSV b about contract key, after header if
// it is set.
func linesOf(b []byte, key, header string) []byte {
	out := bytes.NewBufferString(header)
	for _, l := range bytes.SplitAfter(b, []byte("\n")) {
		if bytes.HasPrefix(l, []byte(key+",")) {
			out.Write(l)
		}
	}
	return out.Bytes()
}

// A preview of the golden tiers over output priced without discounts
// prices the golden rows under its generation while the export stays the
// first pricing's; its totals and diff agree with its rows; approving
// makes it the export, byte for byte, and verification holds.
func TestPreviewApprovedBecomesCurrent(t *testing.T) {
	t.Parallel()
	db, first := previewedUndiscounted(t)
	ctx := context.Background()
	// A second re-pricing or preview is refused while one waits.
	if _, err := start(t, db, []rerate.Request{{Contract: "random-mix"}}); !errors.Is(err, rerate.ErrPreviewPending) ||
		!strings.Contains(err.Error(), "approve") {
		t.Fatalf("re-pricing a contract with a preview waiting: %v", err)
	}
	runUntilDone(t, db, distributor.Config{BatchSize: 97})

	sameBytes(t, "export while the preview waits", exportBytes(t, db), first)
	sameBytes(t, "the previews", previewBytes(t, db), golden(t))
	if g := count(t, db.DB, `SELECT count(*) FROM baton.contracts WHERE current_generation <> 1`); g != 0 {
		t.Fatalf("%d contracts switched to their preview before approval", g)
	}
	previews, err := rerate.NewStore(db, "").Previews(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := goldenTotals(t)
	for _, p := range previews {
		if !p.CaughtUp || p.NetTotal != want[p.Contract].net || p.NetChange != p.NetTotal-p.CurrentNetTotal || p.Priced != want[p.Contract].n {
			t.Errorf("preview %+v, want caught up with net %d over %d records", p, want[p.Contract].net, want[p.Contract].n)
		}
	}
	if len(previews) != len(vectorTiers(t)) {
		t.Errorf("%d previews, want %d", len(previews), len(vectorTiers(t)))
	}
	sums := map[string]int64{}
	diffs, err := rerate.NewStore(db, "").DiffPreview(ctx, nil, func(c rerate.Change) error {
		sums[c.Contract] += c.NewNet - c.OldNet
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diffs {
		if d.NewNetTotal-d.OldNetTotal != sums[d.Contract] || d.Current != 2 || d.Previous != 1 {
			t.Errorf("diff of %s: %+v, its rows change the net by %d", d.Contract, d, sums[d.Contract])
		}
	}

	approved, err := rerate.NewStore(db, "").Approve(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range approved {
		if a.Pricing || a.Current != 2 {
			t.Errorf("approved %+v, want current at once", a)
		}
	}
	if len(approved) != len(vectorTiers(t)) {
		t.Errorf("%d approved, want %d", len(approved), len(vectorTiers(t)))
	}
	sameBytes(t, "export after approval", exportBytes(t, db), golden(t))
	sameBytes(t, "previous generation after approval", previousBytes(t, db), first)
	verifyClean(t, db)
	if _, err := rerate.NewStore(db, "").Approve(ctx, []string{"random-mix"}); !errors.Is(err, rerate.ErrNoPreview) {
		t.Fatalf("approving a contract without a preview: %v", err)
	}
}

// Records loaded while a preview waits are priced in both generations:
// the current one stays the golden output of every record, the preview
// prices every record without discount; discarding it leaves the current
// generation as it was, and a later re-pricing gets a generation number
// of its own.
func TestPreviewPricesNewRecordsInBothAndDiscards(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{MaxOpenConns: 8})
	ctx := context.Background()
	b, err := os.ReadFile(vectors + "records.csv")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	half := len(lines) / 2
	firstHalf := writeFile(t, "first.csv", lines[:half])
	secondHalf := writeFile(t, "second.csv", append([]string{lines[0]}, lines[half:]...))
	if _, err := ingest.NewStore(db, "").Load(ctx, ingest.Options{TiersPath: vectors + "tiers.csv", RecordsPath: firstHalf}); err != nil {
		t.Fatal(err)
	}
	runUntilDone(t, db, distributor.Config{BatchSize: 61})
	previewAll(t, db, true)
	// Loaded before the preview's batches run: the partition's preview
	// reaches them from its start, with the current generation's
	// checkpoint at the first half.
	if _, err := ingest.NewStore(db, "").Load(ctx, ingest.Options{RecordsPath: secondHalf}); err != nil {
		t.Fatal(err)
	}
	// Splitting every backlog of more than 2 records: a preview is split
	// only where the current generation has priced all it has pending,
	// so never the previews of contracts with records in the second half
	// (the current generation's pricing of them must go in order).
	runUntilDone(t, db, distributor.Config{BatchSize: 61, SegmentRecords: 1})
	later := map[string]bool{}
	for _, l := range lines[half:] {
		later[strings.SplitN(l, ",", 2)[0]] = true
	}
	rows, err := db.QueryContext(ctx, `SELECT DISTINCT segment_of FROM baton.tasks WHERE segment_of IS NOT NULL AND generation = 2`)
	if err != nil {
		t.Fatal(err)
	}
	var split []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			t.Fatal(err)
		}
		if later[c] {
			t.Errorf("the preview of %s, with records loaded after it started, was split", c)
		}
		split = append(split, c)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("previews split: %v", split)
	sameBytes(t, "export of every record while the preview waits", exportBytes(t, db), golden(t))
	sameBytes(t, "the previews of every record", previewBytes(t, db), undiscounted(t))
	verifyClean(t, db)

	// More records after the preview caught up: claimed again, priced in
	// both again.
	if _, err := ingest.NewStore(db, "").Load(ctx, ingest.Options{RecordsPath: writeFile(t, "more.csv", []string{lines[0],
		"random-mix,random-mix-extra-1,5000", "random-mix,random-mix-extra-2,7001"})}); err != nil {
		t.Fatal(err)
	}
	runUntilDone(t, db, distributor.Config{BatchSize: 61})
	if n := count(t, db.DB, `SELECT count(*) FROM baton.priced_rows WHERE record_id LIKE 'random-mix-extra-%' AND generation IN (1, 2)`); n != 4 {
		t.Fatalf("%d rows of the 2 extra records in generations 1 and 2, want 4", n)
	}
	if n := count(t, db.DB, `SELECT count(*) FROM baton.priced_generation('random-mix', 2) WHERE record_id LIKE 'random-mix-extra-%' AND net_minor = gross_minor`); n != 2 {
		t.Fatalf("%d undiscounted preview rows of the extra records, want 2", n)
	}
	withExtra := exportBytes(t, db)

	discarded, err := rerate.NewStore(db, "").Discard(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(discarded) != len(vectorTiers(t)) {
		t.Fatalf("%d discarded, want %d", len(discarded), len(vectorTiers(t)))
	}
	sameBytes(t, "export after discarding", exportBytes(t, db), withExtra)
	if n := count(t, db.DB, `SELECT count(*) FROM baton.priced_rows WHERE generation = 2`); n != 0 {
		t.Errorf("%d rows of the discarded previews left", n)
	}
	if n := count(t, db.DB, `SELECT count(*) FROM baton.generations WHERE generation = 2 AND state = 'discarded'`); n != int64(len(vectorTiers(t))) {
		t.Errorf("%d discarded generations, want %d", n, len(vectorTiers(t)))
	}
	if n := count(t, db.DB, `SELECT count(*) FROM baton.tasks WHERE kind = 'pricing' AND (generation <> 1 OR position <> available)`); n != 0 {
		t.Errorf("%d partitions not back at generation 1, caught up", n)
	}
	// Nothing to price after the discard: the current generation was
	// complete.
	runUntilDone(t, db, distributor.Config{BatchSize: 61})
	sameBytes(t, "export after discarding and running", exportBytes(t, db), withExtra)

	started, err := start(t, db, []rerate.Request{{Contract: "random-mix", Reason: "again"}})
	if err != nil || len(started) != 1 || started[0].Generation != 3 {
		t.Fatalf("re-pricing after a discarded preview: %+v, %v; want generation 3", started, err)
	}
	runUntilDone(t, db, distributor.Config{BatchSize: 61})
	sameBytes(t, "export after re-pricing", exportBytes(t, db), withExtra)
}

// A preview of an amendment prices the amended amount under the preview
// only; the record keeps its amount and the export its rows until
// approval, which applies the amount.
func TestPreviewOfAnAmendment(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{MaxOpenConns: 8})
	ctx := context.Background()
	const key, seq = "random-mix", 1500
	truth := loadWithAWrongAmount(t, db, key, seq)
	runUntilDone(t, db, distributor.Config{BatchSize: 83})
	first := exportBytes(t, db)
	amountOf := `SELECT amount_minor FROM baton.records WHERE contract_id = 'random-mix' AND seq = 1500`
	wrong := count(t, db.DB, amountOf)
	rep, err := ingest.NewStore(db, "").Load(ctx, ingest.Options{RecordsPath: writeFile(t, "amend.csv", []string{"contract_id,record_id,amount_minor", truth}),
		Amend: true, Preview: true, Reason: "meter corrected?", StartedBy: "test"})
	if err != nil || rep.RecordsAmended != 1 || rep.ContractsRepriced != 1 {
		t.Fatalf("amending as a preview: %+v, %v", rep, err)
	}
	runUntilDone(t, db, distributor.Config{BatchSize: 83})
	sameBytes(t, "export while the amendment is previewed", exportBytes(t, db), first)
	if got := count(t, db.DB, amountOf); got != wrong {
		t.Errorf("the record's amount is %d while previewed, want %d", got, wrong)
	}
	sameBytes(t, "the preview", previewBytes(t, db), linesOf(golden(t), key, "contract_id,record_id,gross_minor,discount_minor,net_minor\n"))
	if n := count(t, db.DB, `SELECT count(*) FROM baton.priced_rows WHERE generation = 2`); n != 2000-seq+1 {
		t.Errorf("%d rows priced by the preview, want the %d from the amended record on", n, 2000-seq+1)
	}

	if _, err := rerate.NewStore(db, "").Approve(ctx, []string{key}); err != nil {
		t.Fatal(err)
	}
	sameBytes(t, "export after approval", exportBytes(t, db), golden(t))
	if got := count(t, db.DB, amountOf); got != wrong-123457 {
		t.Errorf("the record's amount is %d after approval, want %d", got, wrong-123457)
	}
	verifyClean(t, db)
}

// A worker stopped part-way through pricing a preview (its context
// cancelled) leaves it to the next, which resumes at its checkpoint: the
// preview is exact, the export untouched.
func TestPreviewResumedAfterAWorkerStops(t *testing.T) {
	t.Parallel()
	db, first := previewedUndiscounted(t)
	ctx := context.Background()

	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var n int
	var mu sync.Mutex
	cfg := distributor.Config{Name: "stopped", Kind: pricer.Kind, BatchSize: 50, Heartbeat: 100 * time.Millisecond, StaleAfter: time.Second,
		OnEvent: func(e distributor.Event) {
			if e.Kind != distributor.EventCheckpoint {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if n++; n == 5 {
				stop()
			}
		}}
	d, err := distributor.New(db, pricer.NewStore(db, "").Processor(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Run(wctx); err != nil {
		t.Fatal(err)
	}
	if left := count(t, db.DB, `SELECT count(*) FROM baton.tasks WHERE kind = 'pricing' AND position < available`); left == 0 {
		t.Fatal("the first worker priced every preview before it was stopped")
	}
	// The export is complete and unchanged part-way through the previews.
	sameBytes(t, "export mid-preview", exportBytes(t, db), first)
	runUntilDone(t, db, distributor.Config{BatchSize: 97})
	sameBytes(t, "export", exportBytes(t, db), first)
	sameBytes(t, "the previews", previewBytes(t, db), golden(t))
}

// decideDuringABatch previews the golden tiers of random-mix over output
// priced without discounts and, while a worker's batch of the preview
// (past seq 500) is in flight, calls decide: it must wait for the batch
// (the task row's lock) and return once it has committed. The worker then
// runs until done. It returns the database, what decide returned and the
// first pricing's export.
func decideDuringABatch(t *testing.T, decide func(*rerate.Store) ([]rerate.Decided, error)) (*dbconn.DB, []rerate.Decided, []byte) {
	t.Helper()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{MaxOpenConns: 8})
	ctx := context.Background()
	loadUndiscounted(t, db)
	runUntilDone(t, db, distributor.Config{BatchSize: 97})
	first := exportBytes(t, db)
	const key = "random-mix"
	if _, err := start(t, db, []rerate.Request{{Contract: key, NewTiers: vectorTiers(t)[key], Preview: true}}); err != nil {
		t.Fatal(err)
	}
	inFlight, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var batchPID int // the backend of the batch held in flight
	// Once the held batch is released and until the decision returns, the
	// worker's batches fail (the partition backs off for a second). A
	// stream of batches can otherwise starve the decision: each takes the
	// task row FOR KEY SHARE without queueing behind the decision's FOR
	// UPDATE, and in 1 run in about 60 the worker priced the preview to its
	// end before the decision got the row.
	var releasedHeld, returned atomic.Bool
	proc := pricer.NewStore(db, "").Processor()
	held := distributor.ProcessorFunc(func(ctx context.Context, b *distributor.Batch) (distributor.Result, error) {
		if b.Lease.Key == key && releasedHeld.Load() && !returned.Load() {
			return distributor.Result{}, errors.New("held back until the decision returns")
		}
		res, err := proc.Process(ctx, b)
		if err == nil && b.Lease.Key == key && b.Checkpoint.Position >= 500 {
			once.Do(func() {
				if err = b.Tx.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&batchPID); err != nil {
					err = fmt.Errorf("reading the batch's backend: %w", err)
				}
				close(inFlight)
				<-release
				releasedHeld.Store(true)
			})
		}
		return res, err
	})
	wctx, cancel := context.WithTimeout(ctx, testutil.WaitTimeout(2*time.Minute))
	defer cancel()
	d, err := distributor.New(db, held, distributor.Config{Name: "held", Kind: pricer.Kind, BatchSize: 100, UntilDone: true,
		Heartbeat: 100 * time.Millisecond, StaleAfter: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- d.Run(wctx) }()
	select {
	case <-inFlight:
	case <-wctx.Done():
		t.Fatal("no batch of the preview past seq 500")
	}
	decided := make(chan []rerate.Decided, 1)
	go func() {
		a, err := decide(rerate.NewStore(db, ""))
		if err != nil {
			t.Error(err)
		}
		returned.Store(true)
		decided <- a
	}()
	// The decision waits on the task row the batch holds: its statement
	// locking the task rows, named by its text, blocked by the batch's
	// own session. Other statements mention FOR UPDATE too (the worker's,
	// in their comments), and the decision may wait for a moment on a
	// heartbeat renewing the row: matching either would release the batch
	// before the decision waits for it, and the worker could then price
	// the preview to its end first.
	for count(t, db.DB, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock'
		  AND query LIKE '%t.segment_of IS NULL%ORDER BY t.partition_key%FOR UPDATE'
		  AND ? = ANY (pg_blocking_pids(pid))`, batchPID) == 0 {
		select {
		case a := <-decided:
			t.Fatalf("decided %+v while a batch was in flight", a)
		case <-wctx.Done():
			t.Fatal("the decision never waited for the batch")
		case <-time.After(10 * time.Millisecond):
		}
	}
	close(release)
	a := <-decided
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	return db, a, first
}

// Approving while a batch of the preview is in flight waits for it to
// commit; a preview not caught up then is priced on as a generation to
// become current, and becomes current, exact, when caught up.
func TestApproveWaitsForABatchInFlight(t *testing.T) {
	t.Parallel()
	const key = "random-mix"
	db, a, _ := decideDuringABatch(t, func(s *rerate.Store) ([]rerate.Decided, error) {
		return s.Approve(context.Background(), []string{key})
	})
	if len(a) != 1 || !a[0].Pricing || a[0].Current != 1 {
		t.Fatalf("approved %+v, want generation 2 priced on to become current", a)
	}
	if g := count(t, db.DB, `SELECT current_generation FROM baton.contracts WHERE contract_id = ?`, key); g != 2 {
		t.Fatalf("current generation %d once caught up, want 2", g)
	}
	sameBytes(t, key+"'s export", linesOf(exportBytes(t, db), key, ""), linesOf(golden(t), key, ""))
}

// Discarding while a batch of the preview is in flight waits for it to
// commit, then deletes its rows too and fences the worker's claim out:
// nothing of the preview is left, and the export is the first pricing's.
func TestDiscardWaitsForABatchInFlight(t *testing.T) {
	t.Parallel()
	db, a, first := decideDuringABatch(t, func(s *rerate.Store) ([]rerate.Decided, error) {
		return s.Discard(context.Background(), nil)
	})
	if len(a) != 1 || a[0].Generation != 2 || a[0].Current != 1 {
		t.Fatalf("discarded %+v, want generation 2", a)
	}
	if n := count(t, db.DB, `SELECT count(*) FROM baton.priced_rows WHERE generation = 2`); n != 0 {
		t.Errorf("%d rows of the discarded preview left", n)
	}
	if n := count(t, db.DB, `SELECT count(*) FROM baton.tasks WHERE kind = 'pricing' AND (generation <> 1 OR position <> available)`); n != 0 {
		t.Errorf("%d partitions not back at generation 1, caught up", n)
	}
	sameBytes(t, "export", exportBytes(t, db), first)
}

// A tier change previewed before any record is loaded: the records loaded
// afterwards are priced under the contracts' tiers (the export is the
// golden file) and under the preview's (no discount).
func TestPreviewBeforeAnyRecord(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{MaxOpenConns: 8})
	ctx := context.Background()
	if _, err := ingest.NewStore(db, "").Load(ctx, ingest.Options{TiersPath: vectors + "tiers.csv"}); err != nil {
		t.Fatal(err)
	}
	rep, err := ingest.NewStore(db, "").Load(ctx, ingest.Options{TiersPath: noDiscountTiers(t), Reprice: true, Preview: true})
	if err != nil || rep.ContractsRepriced == 0 {
		t.Fatalf("previewing tiers: %+v, %v", rep, err)
	}
	if _, err := ingest.NewStore(db, "").Load(ctx, ingest.Options{RecordsPath: vectors + "records.csv"}); err != nil {
		t.Fatal(err)
	}
	runUntilDone(t, db, distributor.Config{BatchSize: 97})
	sameBytes(t, "export", exportBytes(t, db), golden(t))
	// Contracts whose tiers had no discount already were not previewed:
	// their current output is their preview's export.
	var buf bytes.Buffer
	if _, err := export.NewStore(db, "").WritePreview(ctx, &buf); err != nil {
		t.Fatal(err)
	}
	sameBytes(t, "export of the previews", buf.Bytes(), undiscounted(t))
	verifyClean(t, db)
}

// A preview of a contract whose later segment has priced its records
// while an earlier one has not (its position past its processed prefix)
// removes the current generation's rows past the prefix: the preview's
// batches price those records under the current generation again, from
// the prefix on. The current export stays the first pricing's; approval
// makes it the golden output.
func TestPreviewOfAContractWithASegmentAhead(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{MaxOpenConns: 8})
	loadUndiscounted(t, db)
	runUntilDone(t, db, distributor.Config{BatchSize: 97})
	first := exportBytes(t, db)
	// The split state: records 501–1024 of random-mix in a segment that
	// has priced none of them, 1025–2000 in one that has priced all; the
	// contract's row is at 2000, its processed prefix at 500.
	const key = "random-mix"
	for _, q := range []string{
		`DELETE FROM baton.priced_rows WHERE contract_id = '` + key + `' AND seq > 500 AND seq <= 1024`,
		`INSERT INTO baton.tasks (kind, partition_key, segment_of, generation, position, available)
		 VALUES ('pricing', '` + partition.SegmentKey(key, 500) + `', '` + key + `', 1, 500, 1024),
		        ('pricing', '` + partition.SegmentKey(key, 1024) + `', '` + key + `', 1, 2000, 2000)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, db.DB, `SELECT done_through FROM baton.partition_progress WHERE partition_key = ?`, key); n != 500 {
		t.Fatalf("processed prefix %d, want 500", n)
	}
	previewAll(t, db, false)
	if n := count(t, db.DB, `SELECT count(*) FROM baton.priced_rows WHERE contract_id = ? AND seq > 500`, key); n != 0 {
		t.Fatalf("%d rows past the prefix left after the preview started, want none", n)
	}
	runUntilDone(t, db, distributor.Config{BatchSize: 97})
	sameBytes(t, "export while the preview waits", exportBytes(t, db), first)
	if _, err := rerate.NewStore(db, "").Approve(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	sameBytes(t, "export after approval", exportBytes(t, db), golden(t))
	verifyClean(t, db)
}
