package distributor_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/partition"
)

// env is one test's database with a generic work model: a partition's items
// are the integers 1..available, and the test processor writes one output
// row per item, keyed (key, n), so a duplicate is a primary-key violation
// and a gap is a missing row.
type env struct {
	t   *testing.T
	dsn string
	db  *dbconn.DB
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dsn := pgtest.NewURL(t)
	db := pgtest.OpenDB(t, dsn, dbconn.Options{MaxOpenConns: 20})
	if _, err := db.Exec(`CREATE TABLE test_output (
		key text NOT NULL, n bigint NOT NULL, owner text NOT NULL, version bigint NOT NULL,
		PRIMARY KEY (key, n))`); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, dsn: dsn, db: db}
}

// addWork makes n more items available on each key, as a producer would.
func (e *env) addWork(n int64, keys ...string) {
	e.t.Helper()
	work := make([]partition.Work, len(keys))
	for i, k := range keys {
		work[i] = partition.Work{Key: k, N: n}
	}
	if _, err := partition.NewStore(e.db, "").AddWorks(context.Background(), work); err != nil {
		e.t.Fatal(err)
	}
}

func keys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%03d", prefix, i)
	}
	return out
}

// verify checks that every available item of every partition was output
// exactly once and that checkpoints match.
func (e *env) verify() {
	e.t.Helper()
	rows, err := e.db.Query(`
		SELECT t.partition_key, t.available, t.position, count(o.n), coalesce(min(o.n), 0), coalesce(max(o.n), 0)
		FROM baton.tasks t LEFT JOIN test_output o ON o.key = t.partition_key
		GROUP BY t.partition_key, t.available, t.position`)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var avail, pos, cnt, lo, hi int64
		if err := rows.Scan(&k, &avail, &pos, &cnt, &lo, &hi); err != nil {
			e.t.Fatal(err)
		}
		if pos != avail || cnt != avail || (avail > 0 && (lo != 1 || hi != avail)) {
			e.t.Errorf("partition %s: available %d, position %d, %d outputs spanning %d..%d", k, avail, pos, cnt, lo, hi)
		}
	}
}

// proc is the test processor. Hooks let tests block or fail batches.
type proc struct {
	mu      sync.Mutex
	batches map[string]int // batches processed per key
	before  func(ctx context.Context, b *distributor.Batch) error
}

func newProc() *proc { return &proc{batches: map[string]int{}} }

func (p *proc) Process(ctx context.Context, b *distributor.Batch) (distributor.Result, error) {
	if p.before != nil {
		if err := p.before(ctx, b); err != nil {
			return distributor.Result{}, err
		}
	}
	end := b.Checkpoint.Position + int64(b.Limit)
	if _, err := b.Tx.ExecContext(ctx, `
		INSERT INTO test_output (key, n, owner, version)
		SELECT ?, n, ?, ? FROM generate_series(?::bigint, ?::bigint) n`,
		b.Lease.Key, b.Owner, b.Lease.Version, b.Checkpoint.Position+1, end); err != nil {
		return distributor.Result{}, err
	}
	p.mu.Lock()
	p.batches[b.Lease.Key]++
	p.mu.Unlock()
	return distributor.Result{Position: end, State: []byte(fmt.Sprintf(`{"last": %d}`, end))}, nil
}

// busyProc is the test processor slowed to 10 ms a batch, so that
// partitions of a million items stay busy for the whole test.
func busyProc() *proc {
	p := newProc()
	p.before = func(ctx context.Context, b *distributor.Batch) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
			return nil
		}
	}
	return p
}

// events collects distributor events and lets tests wait for one.
type events struct {
	mu   sync.Mutex
	all  []distributor.Event
	cond chan struct{}
}

func newEvents() *events { return &events{cond: make(chan struct{})} }

func (e *events) add(ev distributor.Event) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	close(e.cond)
	e.cond = make(chan struct{})
	e.mu.Unlock()
}

// wait blocks until match holds for some event, or fails the test.
func (e *events) wait(t *testing.T, timeout time.Duration, what string, match func(distributor.Event) bool) distributor.Event {
	t.Helper()
	timeout = testutil.WaitTimeout(timeout)
	deadline := time.After(timeout)
	seen := 0
	for {
		e.mu.Lock()
		for ; seen < len(e.all); seen++ {
			if match(e.all[seen]) {
				ev := e.all[seen]
				e.mu.Unlock()
				return ev
			}
		}
		ch := e.cond
		e.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("timed out after %s waiting for %s; events so far:\n%s", timeout, what, e.dump())
		}
	}
}

// dump formats the events so far (those matching filter, if given), one a
// line, for failure messages.
func (e *events) dump(filter ...func(distributor.Event) bool) string {
	var b strings.Builder
	for _, ev := range e.snapshot() {
		if len(filter) > 0 && !filter[0](ev) {
			continue
		}
		fmt.Fprintf(&b, "  %s %s key=%s v=%d pos=%d items=%d reason=%s err=%v\n",
			ev.At.Format("15:04:05.000"), ev.Kind, ev.Key, ev.Version, ev.Position, ev.Items, ev.Reason, ev.Err)
	}
	return b.String()
}

// changed is closed at the next event.
func (e *events) changed() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cond
}

// snapshot returns the events so far.
func (e *events) snapshot() []distributor.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]distributor.Event(nil), e.all...)
}

func (e *events) count(match func(distributor.Event) bool) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.all {
		if match(ev) {
			n++
		}
	}
	return n
}

func kind(k distributor.EventKind) func(distributor.Event) bool {
	return func(e distributor.Event) bool { return e.Kind == k }
}

func quietLogger() *slog.Logger {
	if os.Getenv("TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// fastConfig is a configuration with short timings for tests.
// oneTransactionLease is the lease of tests that check that a partition
// was claimed, processed and released in one transaction. A first batch
// may take at most a lease less the safety margin; one that would take
// longer (a starved machine can stretch a tiny batch past fastConfig's
// 0.8 s) is rightly rolled back and claimed on its own, in a transaction of
// its own, which those tests would report. With this lease no first batch
// comes near it, and nothing in those tests waits for a lease to end.
const oneTransactionLease = 20 * time.Second

// groupConfig is fastConfig for a worker that runs until done and claims
// unowned partitions in groups of up to 8 (its room), with
// oneTransactionLease.
func groupConfig(name string, ev *events) distributor.Config {
	cfg := fastConfig(name, ev)
	cfg.UntilDone, cfg.MaxPartitions, cfg.ClaimGroup = true, 8, 8
	cfg.StaleAfter = oneTransactionLease
	return cfg
}

// notInOneTransaction counts the partitions not claimed, processed and
// released in one transaction: released at version 2, with every history
// row written by the transaction that last wrote the task row.
func (e *env) notInOneTransaction() int {
	e.t.Helper()
	var n int
	if err := e.db.QueryRow(`SELECT count(*) FROM baton.tasks t
		WHERE t.version <> 2 OR t.owner IS NOT NULL OR EXISTS (
		  SELECT 1 FROM baton.events v WHERE v.partition_key = t.partition_key AND v.xmin::text <> t.xmin::text)`).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func fastConfig(name string, ev *events) distributor.Config {
	return distributor.Config{
		Name: name, Heartbeat: 50 * time.Millisecond, StaleAfter: time.Second, Confirm: 3,
		BatchSize: 10, Logger: quietLogger(), OnEvent: ev.add,
		Backoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, ShutdownTimeout: 5 * time.Second,
	}
}

func (e *env) start(cfg distributor.Config, p distributor.Processor) *distributor.Distributor {
	e.t.Helper()
	db := pgtest.OpenDB(e.t, e.dsn, dbconn.Options{MaxOpenConns: cfg.MaxPartitions + 4 + 8})
	d, err := distributor.New(db, p, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(d.Stop)
	return d
}

func waitDone(t *testing.T, d *distributor.Distributor, timeout time.Duration) error {
	t.Helper()
	select {
	case <-d.Done():
		return d.Err()
	case <-time.After(testutil.WaitTimeout(timeout)):
		t.Fatalf("distributor did not finish within %s", testutil.WaitTimeout(timeout))
		return nil
	}
}

func openNamed(t *testing.T, dsn, app string, conns int) *dbconn.DB {
	t.Helper()
	return pgtest.OpenDB(t, dsn, dbconn.Options{ApplicationName: app, MaxOpenConns: conns})
}

// heldBy returns how many partitions each worker name holds, leaving out
// those holding none.
func (e *env) heldBy() map[string]int {
	e.t.Helper()
	_, workers, err := partition.NewStore(e.db, "").Status(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	held := map[string]int{}
	for _, w := range workers {
		if w.Owned > 0 {
			held[w.Name] = w.Owned
		}
	}
	return held
}
