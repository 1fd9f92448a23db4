package faults

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/pricing"
	"github.com/batonhq/baton/pricing/export"
	"github.com/batonhq/baton/pricing/ingest"
	"github.com/batonhq/baton/pricing/pricer"
	"github.com/batonhq/baton/pricing/pricingschema"
	"github.com/batonhq/baton/pricing/seed"
)

var long = flag.Bool("long", false, "soak mode: more data, more faults, several schedules per scenario")

// workerBin is the worker binary built once for the package.
var workerBin string

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "baton-faults-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if workerBin, err = testutil.BuildWorker(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := pgtest.Run(m, pricingschema.Set)
	printSummary()
	printNotes()
	os.RemoveAll(dir)
	os.Exit(code)
}

func isLong() bool { return *long || os.Getenv("BATON_FAULTS_LONG") == "1" }

// schedules is how many randomized runs each scenario makes.
func schedules() int {
	if isLong() {
		return 5
	}
	return 1
}

// scenarioSeed returns the seed of a run (testutil.Seed: random unless
// BATON_SEED is set, logged for replay).
func scenarioSeed(t *testing.T) uint64 {
	t.Helper()
	return uint64(testutil.Seed(t))
}

// workerStaleAfter is the lease length of the workers under test.
const workerStaleAfter = time.Second

// Timings of the workers under test.
var workerTimings = []string{"--heartbeat", "200ms", "--stale-after", workerStaleAfter.String(), "--confirm", "3"}

// run is one scenario run: a database, input data, worker processes.
type run struct {
	t       *testing.T
	rng     *rand.Rand
	dsn     string
	db      *dbconn.DB
	dir     string
	mu      sync.Mutex
	workers []*proc
	next    int
	stats   *stats
	inputs  []string // records files loaded, in order
	tiers   string
	// tierUpdates are tier files loaded later with --reprice, in order;
	// amendFiles the records files among inputs loaded with --amend;
	// prunedFiles the records files among inputs whose loads "worker
	// prune" removed (the records they were the first to deliver).
	tierUpdates, amendFiles, prunedFiles []string
}

type proc struct {
	name    string
	cmd     *exec.Cmd
	log     *bytes.Buffer
	logMu   *sync.Mutex
	done    chan struct{}
	err     error
	killed  bool
	stopped bool
	// stoppedAt is when the test sent the worker SIGTERM, if it did.
	stoppedAt time.Time
}

func newRun(t *testing.T, seedValue uint64) *run {
	t.Helper()
	return newRunOn(t, seedValue, pgtest.NewURL(t))
}

// newRunOn is newRun on a migrated database of the test's own.
func newRunOn(t *testing.T, seedValue uint64, dsn string) *run {
	t.Helper()
	r := &run{t: t, rng: rand.New(rand.NewPCG(seedValue, 0xfa17)), dsn: dsn, dir: t.TempDir(),
		db: pgtest.OpenDB(t, dsn, dbconn.Options{MaxOpenConns: 4}), stats: newStats(t.Name())}
	t.Cleanup(func() {
		for _, w := range r.workers {
			_ = w.cmd.Process.Kill()
			_ = w.cmd.Process.Signal(syscall.SIGCONT)
		}
		for _, w := range r.workers {
			<-w.done
		}
		record(r.stats)
	})
	return r
}

// seedData writes and loads contracts × perContract records.
func (r *run) seedData(contracts, perContract int) {
	r.t.Helper()
	o := seed.Options{Contracts: contracts, RecordsPerContract: perContract, Seed: r.rng.Uint64(), Prefix: "f"}
	r.tiers = filepath.Join(r.dir, "tiers.csv")
	records := filepath.Join(r.dir, "records-1.csv")
	write(r.t, r.tiers, func(w io.Writer) error { return seed.WriteTiers(w, o) })
	write(r.t, records, func(w io.Writer) error { return seed.WriteRecords(w, o, nil) })
	r.load(records, r.tiers)
}

func (r *run) load(records, tiers string) ingest.Report {
	r.t.Helper()
	rep, err := ingest.NewStore(r.db, "").Load(context.Background(), ingest.Options{TiersPath: tiers, RecordsPath: records})
	if err != nil {
		r.t.Fatalf("loading %s: %v", records, err)
	}
	r.inputs = append(r.inputs, records)
	return rep
}

func write(t *testing.T, path string, fn func(io.Writer) error) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	bw := bufio.NewWriter(f)
	if err := fn(bw); err != nil {
		t.Fatal(err)
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// start launches an until-done worker process connecting to dsn (the
// database, or a proxy in front of it).
func (r *run) start(dsn string, extra ...string) *proc {
	r.t.Helper()
	return r.launch(dsn, append([]string{"--until-done"}, extra...)...)
}

// launch starts a worker process with the given extra flags.
func (r *run) launch(dsn string, extra ...string) *proc {
	r.t.Helper()
	r.mu.Lock()
	r.next++
	name := fmt.Sprintf("w%d", r.next)
	r.mu.Unlock()
	args := append([]string{"run", "--id", name, "--log-format", "json", "--batch-size", "40"}, workerTimings...)
	args = append(args, extra...)
	cmd := exec.Command(workerBin, args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dsn)
	p := &proc{name: name, cmd: cmd, log: &bytes.Buffer{}, logMu: &sync.Mutex{}, done: make(chan struct{})}
	lw := lockedWriter{p.log, p.logMu}
	cmd.Stdout, cmd.Stderr = lw, lw
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	r.mu.Lock()
	r.workers = append(r.workers, p)
	r.mu.Unlock()
	return p
}

type lockedWriter struct {
	b  *bytes.Buffer
	mu *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (p *proc) logs() string {
	p.logMu.Lock()
	defer p.logMu.Unlock()
	return p.log.String()
}

// progress is the number of records priced so far: every contract's
// records but its pending ones, its segments' included
// (partition_progress), since a split contract's own checkpoint moves
// past the records its segments have still to price.
func (r *run) progress() (done, total int64) {
	r.t.Helper()
	if err := r.db.QueryRow(`SELECT coalesce(sum(available - pending), 0), coalesce(sum(available), 0)
		FROM baton.partition_progress`).Scan(&done, &total); err != nil {
		r.t.Fatal(err)
	}
	return done, total
}

// waitProgress blocks until the given fraction of records is priced.
func (r *run) waitProgress(frac float64) {
	r.t.Helper()
	testutil.Eventually(r.t, 2*time.Minute, fmt.Sprintf("%.0f%% of the records priced", 100*frac), func() error {
		if done, total := r.progress(); total == 0 || float64(done) < frac*float64(total) {
			return fmt.Errorf("stuck at %d/%d records", done, total)
		}
		return nil
	})
}

// heldBy lists the contracts a worker holds now.
func (r *run) heldBy(name string) []string {
	r.t.Helper()
	return r.keys(`SELECT partition_key FROM baton.tasks WHERE owner LIKE ? || '#%'`, name)
}

// keys runs a query of one text column and returns its values.
func (r *run) keys(query string, args ...any) []string {
	r.t.Helper()
	rows, err := r.db.Query(query, args...)
	if err != nil {
		r.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			r.t.Fatal(err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		r.t.Fatal(err)
	}
	return out
}

// dbNow is the database's clock, the one takeovers are measured on.
func (r *run) dbNow() time.Time {
	r.t.Helper()
	var now time.Time
	if err := r.db.QueryRow(`SELECT clock_timestamp()`).Scan(&now); err != nil {
		r.t.Fatal(err)
	}
	return now
}

// victim picks a running worker holding partly priced contracts.
func (r *run) victim() *proc {
	r.t.Helper()
	w, _ := r.victimHolding("a contract", func(string) bool { return true })
	return w
}

// victimHolding picks a running worker holding task rows whose keys keep
// accepts (what describes them), and returns it with those keys.
func (r *run) victimHolding(what string, keep func(key string) bool) (*proc, []string) {
	r.t.Helper()
	var victim *proc
	var keys []string
	testutil.Eventually(r.t, 30*time.Second, "a running worker holding "+what, func() error {
		r.mu.Lock()
		var live []*proc
		for _, w := range r.workers {
			if !w.killed && !w.stopped && !isDone(w.done) {
				live = append(live, w)
			}
		}
		r.mu.Unlock()
		r.rng.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
		for _, w := range live {
			if held := slices.DeleteFunc(r.heldBy(w.name), func(k string) bool { return !keep(k) }); len(held) > 0 {
				victim, keys = w, held
				return nil
			}
		}
		return fmt.Errorf("none of %d running workers holds %s", len(live), what)
	})
	return victim, keys
}

func isDone(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// orphan records a fault that took contracts away from a worker, for the
// takeover measurement after the run.
type orphan struct {
	worker    string
	at        time.Time // database clock
	contracts []string
	// instance is the killed process's owner id (name#suffix), when
	// known: a process that replaces it under the same name is then
	// "another worker" too.
	instance string
}

// takeovers measures, for every contract a faulted worker held, the time
// from the fault to the first batch another worker committed on it.
func (r *run) takeovers(orphans []orphan) {
	r.t.Helper()
	for _, o := range orphans {
		for _, c := range o.contracts {
			var first *time.Time
			if err := r.db.QueryRow(`SELECT min(priced_at) FROM baton.priced
				WHERE contract_id = ? AND priced_at > ? AND priced_by NOT LIKE ? || '#%'`, c, o.at, o.worker).Scan(&first); err != nil {
				r.t.Fatal(err)
			}
			if first != nil {
				r.stats.takeover(first.Sub(o.at))
			}
		}
	}
}

// waitAll waits for every worker and checks that only the ones the test
// killed exited non-zero.
func (r *run) waitAll(timeout time.Duration) {
	r.t.Helper()
	deadline := time.After(timeout)
	for _, w := range r.workers {
		select {
		case <-w.done:
		case <-deadline:
			r.t.Fatalf("worker %s did not finish within %s; log tail:\n%s", w.name, timeout, tail(w.logs(), 20))
		}
		if w.killed {
			continue
		}
		if w.err != nil {
			r.t.Errorf("worker %s exited with %v; log tail:\n%s", w.name, w.err, tail(w.logs(), 30))
		}
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// check compares the export against an independent recomputation from the
// input files with the pricing engine, and runs the SQL verification.
func (r *run) check() {
	r.t.Helper()
	want := r.expected()
	var got bytes.Buffer
	if _, err := export.NewStore(r.db, "").Write(context.Background(), &got); err != nil {
		r.t.Fatal(err)
	}
	gotLines := strings.Split(strings.TrimRight(got.String(), "\n"), "\n")[1:]
	if len(gotLines) != len(want) {
		r.t.Errorf("exported %d priced records, want %d", len(gotLines), len(want))
		r.stats.discrepancies += abs(len(gotLines) - len(want))
	}
	for i := 0; i < min(len(gotLines), len(want)); i++ {
		if gotLines[i] != want[i] {
			r.stats.discrepancies++
			if r.stats.discrepancies < 5 {
				r.t.Errorf("line %d: got %s, want %s", i+2, gotLines[i], want[i])
			}
		}
	}
	sum, err := pricer.NewStore(r.db, "").Verify(context.Background())
	if err != nil {
		r.t.Fatal(err)
	}
	for _, m := range sum.Mismatches {
		r.stats.discrepancies++
		r.t.Errorf("verification: %s", m.Description)
	}
	r.stats.records += int64(len(want))
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// expected prices the input files in acceptance order with the pricing
// engine under the current tiers (currentTiers), skipping re-deliveries;
// a record of an amendment file (amendFiles) with a known id and another
// amount replaces that record's amount where it stands. It returns export
// lines in export order, without the records of pruned files
// (prunedFiles), which count towards the tiers all the same.
func (r *run) expected() []string {
	r.t.Helper()
	tiers := r.currentTiers()
	type rec struct {
		id     string
		amount int64
		pruned bool
	}
	recs := map[string][]rec{}
	at := map[string]int{} // contract and id → index in recs[contract]
	for _, in := range r.inputs {
		amending := slices.Contains(r.amendFiles, in)
		pruned := slices.Contains(r.prunedFiles, in)
		readCSV(r.t, in, func(f []string) {
			amount, _ := strconv.ParseInt(f[2], 10, 64)
			key := f[0] + "\x00" + f[1]
			if i, seen := at[key]; seen {
				if amending {
					recs[f[0]][i].amount = amount
				}
				return
			}
			at[key] = len(recs[f[0]])
			recs[f[0]] = append(recs[f[0]], rec{f[1], amount, pruned})
		})
	}
	contracts := make([]string, 0, len(recs))
	for c := range recs {
		contracts = append(contracts, c)
	}
	slices.Sort(contracts) // byte order
	var out []string
	for _, c := range contracts {
		s, err := pricing.NewSchedule(tiers[c])
		if err != nil {
			r.t.Fatal(err)
		}
		cur, _ := s.Resume(0)
		for _, x := range recs[c] {
			l, err := cur.Next(x.amount)
			if err != nil {
				r.t.Fatal(err)
			}
			if x.pruned {
				continue
			}
			out = append(out, fmt.Sprintf("%s,%s,%d,%d,%d", c, x.id, l.Gross, l.Discount, l.Net))
		}
	}
	return out
}

// currentTiers reads the run's tiers: the first file, then each re-pricing
// tier file, whose sets replace a contract's whole set.
func (r *run) currentTiers() map[string][]pricing.Tier {
	tiers := map[string][]pricing.Tier{}
	for _, path := range append([]string{r.tiers}, r.tierUpdates...) {
		fresh := map[string][]pricing.Tier{}
		readCSV(r.t, path, func(f []string) {
			th, _ := strconv.ParseInt(f[1], 10, 64)
			bp, _ := strconv.ParseInt(f[2], 10, 64)
			fresh[f[0]] = append(fresh[f[0]], pricing.Tier{ThresholdMinor: th, DiscountBP: bp})
		})
		for c, ts := range fresh {
			tiers[c] = ts
		}
	}
	return tiers
}

func readCSV(t *testing.T, path string, fn func([]string)) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cr := csv.NewReader(f)
	if _, err := cr.Read(); err != nil {
		t.Fatal(err)
	}
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		fn(rec)
	}
}
