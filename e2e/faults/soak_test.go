package faults

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/batonhq/baton/pricing/pricingschema"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pglocal"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/schema"
)

var soakFlag = flag.Bool("soak", false, "run the full soak (BATON_SOAK_FAULTS faults, 1000 unless set) instead of its short slice")

// soakConfig sizes a soak run.
type soakConfig struct {
	full      bool
	faults    int // process, network and database faults to inject (loads come on top)
	workers   int // pricing worker processes, each behind its own proxy
	clients   int // soak clients (leader election, entity locks), each behind its own proxy
	injectors int // faults injected at once, on different processes
	contracts int
	restarts  [2]time.Duration // pause between database restarts: from, to
	limit     time.Duration    // the injection phase must reach faults within this
}

func soakSettings(t *testing.T) soakConfig {
	t.Helper()
	c := soakConfig{faults: 40, workers: 4, clients: 2, injectors: 3, contracts: 16,
		restarts: [2]time.Duration{5 * time.Second, 10 * time.Second}}
	if *soakFlag || os.Getenv("BATON_SOAK") == "1" {
		c = soakConfig{full: true, faults: 1000, workers: 6, clients: 3, injectors: 4, contracts: 24,
			restarts: [2]time.Duration{10 * time.Second, 25 * time.Second}}
	}
	if v := os.Getenv("BATON_SOAK_FAULTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("BATON_SOAK_FAULTS=%q: want a positive number", v)
		}
		c.faults = n
	}
	// About two faults a second are injected; the bound leaves room for a
	// loaded machine.
	c.limit = testutil.WaitTimeout(time.Minute + time.Duration(c.faults)*1500*time.Millisecond)
	return c
}

// Fault kinds injected on processes (a worker or a client), with weights.
var soakProcessFaults = []struct {
	kind   string
	weight int
}{
	{"sigkill", 25},
	{"sigstop", 20},
	{"partition_blackhole", 15},
	{"latency", 15},
	{"conn_reset", 15},
	{"sigterm_restart", 10},
}

// Timings of the soak's workers and clients: short leases, so that faults
// come fast.
var soakTimings = []string{"--heartbeat", "100ms", "--stale-after", "1s", "--confirm", "3"}

// The soak's scheduled jobs, added with "worker schedule add".
var soakJobs = []struct {
	name     string
	args     []string
	min, max string
}{
	// Every second, every slot run (catch-up), released after each run.
	{"tick", []string{"--every", "1s", "--missed", "catch-up", "--lock-at-most-for", "20s"}, "50ms", "300ms"},
	// Kept by one worker while it lives.
	{"lead", []string{"--every", "1s", "--mode", "leader", "--lock-at-most-for", "20s"}, "10ms", "100ms"},
	// Runs longer than the lease: a paused runner's command goes on beside
	// its successor's; a cut-off one is stopped first.
	{"slow", []string{"--every", "3s", "--mode", "expire", "--lock-at-most-for", "20s"}, "1s", "2500ms"},
}

// Lock keys of the soak clients: adv: ones use advisory locks, row: ones
// the insert-then-delete technique (the two methods do not exclude each
// other, so each key keeps one).
var soakLockKeys = []string{"adv:0", "adv:1", "row:0", "row:1"}

// soakTarget is a slot for one process at a time (a worker or a client)
// with its own proxy to the database; a killed process is replaced in the
// same slot.
type soakTarget struct {
	kind    string             // worker or client
	proxies []*toxiproxy.Proxy // one per database host
	url     string
	mu      sync.Mutex
	cur     *proc
	busy    bool
}

// addToxic adds a toxic to the target's every proxy.
func (tg *soakTarget) addToxic(name, kind, stream, attrs string) error {
	for i, p := range tg.proxies {
		if err := addToxicErr(p, name, kind, stream, attrs); err != nil {
			for _, q := range tg.proxies[:i] {
				err = errors.Join(err, removeToxicErr(q, name))
			}
			return err
		}
	}
	return nil
}

// removeToxic removes a toxic from the target's every proxy.
func (tg *soakTarget) removeToxic(name string) error {
	var errs []error
	for _, p := range tg.proxies {
		errs = append(errs, removeToxicErr(p, name))
	}
	return errors.Join(errs...)
}

func (tg *soakTarget) current() *proc {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return tg.cur
}

// soak is one soak run.
type soak struct {
	t         *testing.T
	cfg       soakConfig
	seed      uint64
	r         *run
	srv       *pglocal.Server // nil in the HA mode
	paf       *pafCluster     // the HA mode's formation (soak_ha_test.go)
	clientBin string
	jobsFile  string
	targets   []*soakTarget

	injected atomic.Int64 // disruptive faults so far

	mu         sync.Mutex
	faults     []soakFault
	kinds      map[string]map[string]int // kind → target kind → count
	clients    []*proc
	nextClient int
	killedAt   map[string]time.Time
	termed     map[string]bool // processes sent SIGTERM
	orphans    []orphan
	problems   []string // failures seen by the background goroutines
	loads      int
	loadFails  int

	// The operator faults (soak_operator_test.go). loadMu orders the
	// loads of records files as they commit (their order in r.inputs).
	loadMu            sync.Mutex
	firstRecords      string   // the first load's records file, every contract's
	prunable          []string // records files of pruned contracts' loads whose next load committed
	opSeq             int
	lastExit          int             // of the operator's last command
	lastOut           string          // of the operator's last command
	redeliveredPruned int             // pruned files loaded again, every record skipped
	opFails           int             // operator commands repeated after a database failure
	pruneSkips        int             // prunes refused: the load's records not all priced yet
	failovers         []time.Duration // HA mode: primary killed → another node accepting writes
}

func (s *soak) problem(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.problems = append(s.problems, fmt.Sprintf(format, args...))
}

func (s *soak) logFault(kind, targetKind, target string, start, end time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case targetKind == "operator":
		// Not a fault on processes: the job checks need not excuse
		// anything for it.
		s.injected.Add(1)
	case kind != "concurrent_load":
		s.faults = append(s.faults, soakFault{Kind: kind, Target: target, Start: start, End: end})
		s.injected.Add(1)
	}
	if s.kinds[kind] == nil {
		s.kinds[kind] = map[string]int{}
	}
	s.kinds[kind][targetKind]++
	s.r.stats.fault("soak_" + kind)
}

// The soak: real worker processes and soak clients against a PostgreSQL of
// its own, with process, network and database faults injected on several
// processes at once, loads and scheduled jobs running throughout; then the
// independent checks (see soak_checker_test.go) and a table of what was
// injected and checked.
//
// Without -soak or BATON_SOAK=1 it runs a short slice (40 faults), as part of
// every "go test ./faults" in e2e/; "make soak" runs 1,000. BATON_SOAK_FAULTS=N sets
// the count either way, and BATON_SEED replays a run's schedule of faults.
func TestSoak(t *testing.T) {
	cfg := soakSettings(t)
	began := time.Now()
	seed := scenarioSeed(t)
	s := &soak{t: t, cfg: cfg, seed: seed, kinds: map[string]map[string]int{}, killedAt: map[string]time.Time{},
		termed: map[string]bool{}}
	var dsn string
	if soakHA() {
		s.paf, dsn = startSoakFormation(t)
		mc, err := maxConnections(t.Context(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("soak: on a pg_auto_failover formation of three nodes (max_connections %s), killing its primary", mc)
	} else {
		s.srv, dsn = startSoakServer(t)
	}
	s.r = newRunOn(t, seed, dsn)
	s.clientBin = buildSoakClient(t)
	s.jobsFile = filepath.Join(s.r.dir, "jobs.jsonl")
	s.setUp()
	t.Logf("soak: %d faults on %d workers and %d clients (%d at once) and the database; seed %d",
		cfg.faults, cfg.workers, cfg.clients, cfg.injectors, seed)

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range cfg.injectors {
		wg.Add(1)
		go func() { defer wg.Done(); s.injector(ctx, rand.New(rand.NewPCG(seed, uint64(100+i)))) }()
	}
	wg.Add(3)
	go func() {
		defer wg.Done()
		if s.paf != nil {
			s.primaryKiller(ctx, rand.New(rand.NewPCG(seed, 200)))
		} else {
			s.restarter(ctx, rand.New(rand.NewPCG(seed, 200)))
		}
	}()
	go func() { defer wg.Done(); s.loader(ctx, rand.New(rand.NewPCG(seed, 300))) }()
	go func() { defer wg.Done(); s.operator(ctx, rand.New(rand.NewPCG(seed, 400))) }()

	injectStart := time.Now()
	deadline := time.NewTimer(cfg.limit)
	tick := time.NewTicker(time.Second)
	lastReport := time.Now()
	for s.injected.Load() < int64(cfg.faults) {
		select {
		case <-deadline.C:
			s.problem("only %d of %d faults injected within %s", s.injected.Load(), cfg.faults, cfg.limit)
		case <-tick.C:
			if time.Since(lastReport) >= 30*time.Second {
				lastReport = time.Now()
				t.Logf("soak: %d faults in %s", s.injected.Load(), time.Since(injectStart).Round(time.Second))
			}
			continue
		}
		break
	}
	deadline.Stop()
	tick.Stop()
	stop()
	wg.Wait()
	injection := time.Since(injectStart)
	t.Logf("soak: %d faults injected in %s; draining", s.injected.Load(), injection.Round(time.Second))

	drainStart := time.Now()
	liveness := s.drain()
	stopStart := time.Now()
	s.stopAll()
	checkStart := time.Now()
	results := append(liveness, s.check()...)
	phases := fmt.Sprintf("set-up %s, faults %s, drain and liveness %s, graceful stop %s, checks %s",
		injectStart.Sub(began).Round(time.Second), injection.Round(time.Second), stopStart.Sub(drainStart).Round(time.Second),
		checkStart.Sub(stopStart).Round(time.Second), time.Since(checkStart).Round(time.Second))
	s.report(results, phases, time.Since(began))
}

// startSoakServer starts a PostgreSQL of the soak's own (restarted many
// times, so not the suite's shared one) with a migrated database "baton".
// Commits are synchronous: an immediate restart must not lose a load the
// loader saw succeed.
func startSoakServer(t *testing.T) (*pglocal.Server, string) {
	t.Helper()
	ctx := t.Context()
	base, err := os.MkdirTemp("", "baton-soak-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	srv, err := pglocal.Start(ctx, pglocal.Options{Dir: filepath.Join(base, "data"),
		Settings: map[string]string{"synchronous_commit": "on", "max_connections": "400"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop(pglocal.Immediate) })
	admin, err := pgx.Connect(ctx, srv.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "CREATE DATABASE baton"); err != nil {
		t.Fatal(err)
	}
	db, err := dbconn.Open(srv.URL("baton"), dbconn.Options{MaxOpenConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	_, err = schema.Migrate(ctx, db, schema.Config{Sets: []*schema.Set{schema.Core, pricingschema.Set}})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	return srv, srv.URL("baton")
}

// buildSoakClient builds the soak client (e2e/faults/internal/soakclient).
func buildSoakClient(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "soakclient")
	build := exec.Command("go", "build", "-o", bin, "github.com/batonhq/baton/e2e/faults/internal/soakclient")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the soak client: %v\n%s", err, out)
	}
	return bin
}

// setUp loads the first data, creates the evidence tables, adds the jobs
// and starts every process.
func (s *soak) setUp() {
	t, r := s.t, s.r
	r.seedData(s.cfg.contracts, 200)
	s.firstRecords = r.inputs[0]
	for _, stmt := range []string{
		`CREATE SCHEMA soak`,
		`CREATE TABLE soak.leader_register (id int PRIMARY KEY, seq bigint NOT NULL, token bigint, owner text)`,
		`INSERT INTO soak.leader_register VALUES (1, 0, NULL, NULL)`,
		// No unique constraints: a duplicate is evidence, not an error.
		`CREATE TABLE soak.leader_writes (seq bigint NOT NULL, token bigint NOT NULL, owner text NOT NULL, written_at timestamptz NOT NULL)`,
		`CREATE TABLE soak.lock_counters (key text PRIMARY KEY, n bigint NOT NULL)`,
		`CREATE TABLE soak.lock_holds (key text NOT NULL, holder text NOT NULL, n bigint NOT NULL,
			held_from timestamptz NOT NULL, held_to timestamptz NOT NULL)`,
	} {
		if _, err := r.db.Exec(stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	for _, k := range soakLockKeys {
		if _, err := r.db.Exec(`INSERT INTO soak.lock_counters VALUES (?, 0)`, k); err != nil {
			t.Fatal(err)
		}
	}
	for _, j := range soakJobs {
		args := append([]string{"schedule", "add", j.name}, j.args...)
		args = append(args, "--", s.clientBin, "job", "--out", s.jobsFile, "--min", j.min, "--max", j.max)
		cmd := exec.Command(workerBin, args...)
		cmd.Env = append(os.Environ(), "DATABASE_URL="+r.dsn)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("worker %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() {
		for _, c := range s.clients {
			_ = c.cmd.Process.Kill()
			_ = c.cmd.Process.Signal(syscall.SIGCONT)
		}
		for _, c := range s.clients {
			<-c.done
		}
	})
	for i := range s.cfg.workers + s.cfg.clients {
		kind := "worker"
		if i >= s.cfg.workers {
			kind = "client"
		}
		proxies, url := soakProxies(t, r.dsn, fmt.Sprintf("%s-%d", kind, i))
		tg := &soakTarget{kind: kind, proxies: proxies, url: url}
		p, err := s.launch(tg)
		if err != nil {
			t.Fatal(err)
		}
		tg.cur = p
		s.targets = append(s.targets, tg)
	}
}

// launch starts the process of a target: a worker (lock mode, until
// stopped) or a soak client.
func (s *soak) launch(tg *soakTarget) (*proc, error) {
	r := s.r
	var name, bin string
	var args []string
	if tg.kind == "worker" {
		r.mu.Lock()
		r.next++
		name = fmt.Sprintf("w%d", r.next)
		r.mu.Unlock()
		bin = workerBin
		args = append([]string{"run", "--id", name, "--log-format", "json", "--batch-size", "20"}, soakTimings...)
	} else {
		s.mu.Lock()
		s.nextClient++
		name = fmt.Sprintf("c%d", s.nextClient)
		s.mu.Unlock()
		bin = s.clientBin
		args = append([]string{"run", "--id", name, "--keys", strings.Join(soakLockKeys, ",")}, soakTimings...)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+tg.url)
	p := &proc{name: name, cmd: cmd, log: &bytes.Buffer{}, logMu: &sync.Mutex{}, done: make(chan struct{})}
	lw := lockedWriter{p.log, p.logMu}
	cmd.Stdout, cmd.Stderr = lw, lw
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	if tg.kind == "worker" {
		r.mu.Lock()
		r.workers = append(r.workers, p)
		r.mu.Unlock()
	} else {
		s.mu.Lock()
		s.clients = append(s.clients, p)
		s.mu.Unlock()
	}
	return p, nil
}

// claim picks a free target at random and marks it busy.
func (s *soak) claim(rng *rand.Rand) *soakTarget {
	order := rng.Perm(len(s.targets))
	for _, i := range order {
		tg := s.targets[i]
		tg.mu.Lock()
		if !tg.busy {
			tg.busy = true
			tg.mu.Unlock()
			return tg
		}
		tg.mu.Unlock()
	}
	return nil
}

func (tg *soakTarget) release() {
	tg.mu.Lock()
	tg.busy = false
	tg.mu.Unlock()
}

func pickFault(rng *rand.Rand) string {
	total := 0
	for _, f := range soakProcessFaults {
		total += f.weight
	}
	n := rng.IntN(total)
	for _, f := range soakProcessFaults {
		if n < f.weight {
			return f.kind
		}
		n -= f.weight
	}
	panic("unreachable")
}

func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// injector injects faults on free targets, one at a time, until the count
// is reached or ctx ends. Every fault is undone before the next (a stopped
// process continued, a toxic removed, a killed process replaced).
func (s *soak) injector(ctx context.Context, rng *rand.Rand) {
	for ctx.Err() == nil && s.injected.Load() < int64(s.cfg.faults) {
		tg := s.claim(rng)
		if tg == nil {
			sleepCtx(ctx, 50*time.Millisecond) // every target is under another fault
			continue
		}
		kind := pickFault(rng)
		name := tg.current().name
		if err := s.inject(rng, tg, kind); err != nil {
			s.problem("%s on %s: %v", kind, name, err)
		}
		tg.release()
		sleepCtx(ctx, between(rng, 100*time.Millisecond, 800*time.Millisecond))
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

var toxicSeq atomic.Int64

// inject applies one fault to a target's process (or its link) and undoes
// it.
func (s *soak) inject(rng *rand.Rand, tg *soakTarget, kind string) error {
	p := tg.current()
	if isDone(p.done) {
		// It exited on its own: the exit check reports it at the end.
		return s.replace(tg)
	}
	id := toxicSeq.Add(1)
	switch kind {
	case "sigkill":
		var held []string
		var instance string
		if tg.kind == "worker" {
			held, instance = s.pendingHeldBy(p.name)
		}
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			return err
		}
		at := time.Now()
		p.killed = true
		if err := waitExit(p, 10*time.Second); err != nil {
			return err
		}
		s.mu.Lock()
		s.killedAt[p.name] = at
		if len(held) > 0 {
			s.orphans = append(s.orphans, orphan{worker: p.name, at: at, contracts: held, instance: instance})
		}
		s.mu.Unlock()
		s.logFault(kind, tg.kind, p.name, at, at)
		return s.replace(tg)
	case "sigstop":
		if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			return err
		}
		start := time.Now()
		time.Sleep(between(rng, 1200*time.Millisecond, 2500*time.Millisecond)) // the pause, past the 1s lease
		err := p.cmd.Process.Signal(syscall.SIGCONT)
		s.logFault(kind, tg.kind, p.name, start, time.Now())
		return err
	case "partition_blackhole":
		down, up := fmt.Sprintf("cut-down-%d", id), fmt.Sprintf("cut-up-%d", id)
		if err := tg.addToxic(down, "timeout", "downstream", `{"timeout":0}`); err != nil {
			return err
		}
		if err := tg.addToxic(up, "timeout", "upstream", `{"timeout":0}`); err != nil {
			return errors.Join(err, tg.removeToxic(down))
		}
		start := time.Now()
		time.Sleep(between(rng, 1200*time.Millisecond, 2500*time.Millisecond)) // the partition, past the lease
		err := errors.Join(tg.removeToxic(down), tg.removeToxic(up))
		s.logFault(kind, tg.kind, p.name, start, time.Now())
		return err
	case "latency":
		name := fmt.Sprintf("lag-%d", id)
		attrs := fmt.Sprintf(`{"latency":%d,"jitter":50}`, 150+rng.IntN(250))
		if err := tg.addToxic(name, "latency", "downstream", attrs); err != nil {
			return err
		}
		start := time.Now()
		time.Sleep(between(rng, time.Second, 3*time.Second)) // how long the link is slow
		err := tg.removeToxic(name)
		s.logFault(kind, tg.kind, p.name, start, time.Now())
		return err
	case "conn_reset":
		// reset_peer with a short timeout resets the process's
		// connections, new and existing, with a TCP RST.
		name := fmt.Sprintf("rst-%d", id)
		if err := tg.addToxic(name, "reset_peer", "upstream", `{"timeout":50}`); err != nil {
			return err
		}
		start := time.Now()
		time.Sleep(between(rng, 100*time.Millisecond, 500*time.Millisecond)) // how long resets go on
		err := tg.removeToxic(name)
		s.logFault(kind, tg.kind, p.name, start, time.Now())
		return err
	case "sigterm_restart":
		start := time.Now()
		s.mu.Lock()
		s.termed[p.name] = true
		s.mu.Unlock()
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			return err
		}
		if err := waitExit(p, 30*time.Second); err != nil {
			return err
		}
		s.logFault(kind, tg.kind, p.name, start, time.Now()) // its exit status: the exit check, at the end
		return s.replace(tg)
	}
	return fmt.Errorf("unknown fault %q", kind)
}

func waitExit(p *proc, timeout time.Duration) error {
	select {
	case <-p.done:
		return nil
	case <-time.After(testutil.WaitTimeout(timeout)):
		return fmt.Errorf("%s did not exit within %s; log tail:\n%s", p.name, timeout, tail(p.logs(), 20))
	}
}

func (s *soak) replace(tg *soakTarget) error {
	p, err := s.launch(tg)
	if err != nil {
		return err
	}
	tg.mu.Lock()
	tg.cur = p
	tg.mu.Unlock()
	return nil
}

func addToxicErr(p *toxiproxy.Proxy, name, kind, stream, attrs string) error {
	js := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, kind, stream, attrs)
	if _, err := p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
		return fmt.Errorf("adding toxic %s: %w", name, err)
	}
	return nil
}

func removeToxicErr(p *toxiproxy.Proxy, name string) error {
	if err := p.Toxics.RemoveToxic(context.Background(), name); err != nil {
		return fmt.Errorf("removing toxic %s: %w", name, err)
	}
	return nil
}

// pendingHeldBy lists the contracts a worker holds with records still to
// price, and the owner id of the process holding them (for the takeover
// figures); nil if the database does not answer.
func (s *soak) pendingHeldBy(name string) (keys []string, instance string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	rows, err := s.r.db.QueryContext(ctx, `SELECT partition_key, owner FROM baton.tasks
		WHERE owner LIKE ? || '#%' AND position < available`, name)
	if err != nil {
		return nil, ""
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		if rows.Scan(&k, &instance) == nil {
			keys = append(keys, k)
		}
	}
	return keys, instance
}

// restarter restarts the database now and then, fast or immediate.
func (s *soak) restarter(ctx context.Context, rng *rand.Rand) {
	for {
		sleepCtx(ctx, between(rng, s.cfg.restarts[0], s.cfg.restarts[1]))
		if ctx.Err() != nil || s.injected.Load() >= int64(s.cfg.faults) {
			return
		}
		mode, kind := pglocal.Fast, "db_restart_fast"
		if rng.IntN(2) == 0 {
			mode, kind = pglocal.Immediate, "db_restart_immediate"
		}
		start := time.Now()
		s.srv.Stop(mode)
		time.Sleep(between(rng, 200*time.Millisecond, 1500*time.Millisecond)) // the outage
		var err error
		for attempt := 0; attempt < 5; attempt++ {
			rctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			err = s.srv.Restart(rctx)
			cancel()
			if err == nil {
				break
			}
		}
		s.logFault(kind, "database", "", start, time.Now())
		if err != nil {
			s.problem("restarting the database: %v", err)
			return
		}
	}
}

// loader keeps the workers busy: whenever few records are left to price,
// it writes a file of new records for some contracts (with a few
// re-deliveries of the previous file's) and loads it with "worker load"
// while the workers run. A load that fails (the database restarting) is
// repeated until it succeeds: a repeat of a load that did commit only
// re-delivers, and is skipped record by record. Every third file has new
// records of the pruned contracts only (pruneClass); once the file after it
// has committed, no record of it is delivered again, and it may be pruned.
func (s *soak) loader(ctx context.Context, rng *rand.Rand) {
	r := s.r
	var prev []string
	prevPrunable := ""
	for n := 2; ctx.Err() == nil; n++ {
		// Wait for the backlog to run low (no notification: poll).
		for ctx.Err() == nil {
			if pending, err := s.pending(); err == nil && pending < 5000 {
				break
			}
			sleepCtx(ctx, 200*time.Millisecond)
		}
		if ctx.Err() != nil {
			return
		}
		path := filepath.Join(r.dir, fmt.Sprintf("records-%d.csv", n))
		pruned := n%3 == 0
		lines := s.recordLines(rng, n, s.classContracts(pruned))
		body := append(slices.Clone(lines), pickSome(rng, prev, 20)...)
		if err := os.WriteFile(path, []byte("contract_id,record_id,amount_minor\n"+strings.Join(body, "\n")+"\n"), 0o644); err != nil {
			s.problem("writing %s: %v", path, err)
			return
		}
		s.loadMu.Lock()
		err := s.loadFile(path)
		if err == nil {
			r.inputs = append(r.inputs, path) // read by the check, after this goroutine ends
		}
		s.loadMu.Unlock()
		if err != nil {
			s.problem("%v", err)
			return
		}
		prev = lines
		s.mu.Lock()
		s.loads++
		if prevPrunable != "" {
			s.prunable = append(s.prunable, prevPrunable)
		}
		s.mu.Unlock()
		prevPrunable = ""
		if pruned {
			prevPrunable = path
		}
		now := time.Now()
		s.logFault("concurrent_load", "load", "", now, now)
		sleepCtx(ctx, between(rng, 500*time.Millisecond, 1500*time.Millisecond)) // loads come now and then, not back to back
	}
}

// recordLines makes new records for a random subset of the contracts of
// one kind.
func (s *soak) recordLines(rng *rand.Rand, n int, of []int) []string {
	var contracts []int
	for _, i := range rng.Perm(len(of))[:2+rng.IntN(len(of)/2)] {
		contracts = append(contracts, of[i])
	}
	per := 100 + rng.IntN(400)
	var lines []string
	for j := range per {
		for _, c := range contracts {
			var amount int64
			switch k := rng.IntN(100); {
			case k < 60:
				amount = 1 + rng.Int64N(100)
			case k < 97:
				amount = 100 + rng.Int64N(100_000)
			default:
				amount = 1_000_000 + rng.Int64N(10_000_000_000)
			}
			lines = append(lines, fmt.Sprintf("f-%06d,l%d-r%d,%d", c, n, j, amount))
		}
	}
	return lines
}

func pickSome(rng *rand.Rand, lines []string, n int) []string {
	if len(lines) == 0 {
		return nil
	}
	var out []string
	for range n {
		out = append(out, lines[rng.IntN(len(lines))])
	}
	return out
}

// loadFile runs "worker load" on path until it succeeds (at most two
// minutes: a load fails while the database restarts).
func (s *soak) loadFile(path string) error {
	deadline := time.Now().Add(testutil.WaitTimeout(2 * time.Minute))
	for attempt := 1; ; attempt++ {
		cmd := exec.Command(workerBin, "load", "--records", path)
		cmd.Env = append(os.Environ(), "DATABASE_URL="+s.r.dsn)
		out, err := cmd.CombinedOutput()
		if err == nil {
			return nil
		}
		var exit *exec.ExitError
		if errors.As(err, &exit) && !s.retriable(exit.ExitCode()) {
			return fmt.Errorf("worker load %s: %v (not a database failure)\n%s", path, err, out)
		}
		s.mu.Lock()
		s.loadFails++
		s.mu.Unlock()
		if time.Now().After(deadline) {
			return fmt.Errorf("worker load %s: still failing after %d attempts: %v\n%s", path, attempt, err, out)
		}
		time.Sleep(300 * time.Millisecond) // back-off before the repeat
	}
}

// retriable reports whether a worker command that exited with code may be
// repeated: exit 1 is a database failure. In the HA mode, so is any code but
// 2 (bad usage) and 3 (invalid input): "worker load" may exit with a code of
// its own when its commit was acknowledged locally but may not have reached
// a standby, and the repeat re-delivers whatever did commit.
func (s *soak) retriable(code int) bool {
	if s.paf != nil {
		return code != 2 && code != 3
	}
	return code == 1
}

// pending is the number of records not yet priced.
func (s *soak) pending() (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var n int64
	err := s.r.db.QueryRowContext(ctx, `SELECT coalesce(sum(available - position), 0) FROM baton.tasks`).Scan(&n)
	return n, err
}

// count runs a count query, tolerating a database that is still coming
// back.
func (s *soak) count(query string) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var n int64
	err := s.r.db.QueryRowContext(ctx, query).Scan(&n)
	return n, err
}

// drain waits, with no more faults, for every record to be priced, and
// for the jobs, the leader and the locks to make progress again.
func (s *soak) drain() []checkResult {
	t := s.t
	// The test's idle connections may have died with the server.
	s.r.db.SetMaxIdleConns(0)
	s.r.db.SetMaxIdleConns(2)
	// Fails on a stall, not on a slow machine: the records left must
	// keep going down, with no 3 minutes without progress (and all of
	// them priced within 30 minutes). A contract stuck unpriced stalls
	// the count; a busy machine only slows it (on one shared by other
	// test runs a 10,000-fault run left 45,000 records to a drain of
	// batches of 20, priced within 5 minutes).
	var left int64
	var lastErr error
	best, progressed := int64(-1), time.Now()
	stall, total := testutil.WaitTimeout(3*time.Minute), time.Now().Add(testutil.WaitTimeout(30*time.Minute))
	if err := pollUntil(testutil.WaitTimeout(30*time.Minute), func() bool {
		left, lastErr = s.pending()
		if lastErr == nil && (best < 0 || left < best) {
			best, progressed = left, time.Now()
		}
		if lastErr == nil && left == 0 {
			return true
		}
		if time.Since(progressed) > stall || time.Now().After(total) {
			lastErr = fmt.Errorf("no progress for %s (%d records left; last error %v)", time.Since(progressed).Round(time.Second), left, lastErr)
			return true
		}
		return false
	}); err != nil || left != 0 {
		t.Logf("the task rows with records left:\n%s", s.unfinished())
		if tr := takeoverReport(s.takeovers()); tr != "" {
			t.Log(tr)
		}
		s.keepEvidence()
		t.Fatalf("every record priced after the faults: %v: %d records left (last error %v)", err, left, lastErr)
	}
	res := checkResult{Name: "no progress after the faults (jobs, leader, locks)"}
	for _, p := range []struct{ what, query string }{
		{"runs of job tick", `SELECT runs FROM baton.jobs WHERE name = 'tick'`},
		{"runs of job lead", `SELECT runs FROM baton.jobs WHERE name = 'lead'`},
		{"leader writes", `SELECT count(*) FROM soak.leader_writes`},
		{"lock holds", `SELECT count(*) FROM soak.lock_holds`},
	} {
		res.Checked++
		var from int64 = -1
		limit := time.Now().Add(testutil.WaitTimeout(30 * time.Second))
		for {
			n, err := s.count(p.query)
			if err == nil && from < 0 {
				from = n
			} else if err == nil && n >= from+2 {
				break
			}
			if time.Now().After(limit) {
				res.violate("%s: no progress within 30s after the faults (%d, last error %v)", p.what, n, err)
				break
			}
			time.Sleep(100 * time.Millisecond) // a count in the database: no notification
		}
	}
	return []checkResult{res}
}

// unfinished describes the task rows with records left: what a drain that
// did not finish waits for.
func (s *soak) unfinished() string {
	rows, err := s.r.db.Query(`SELECT partition_key, version, coalesce(owner, ''), lease_expires_at::text, position, available,
		attempts, coalesce(last_error, ''), checkpoint::text FROM baton.tasks WHERE position < available ORDER BY partition_key`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var key, owner, lease, lastErr, checkpoint string
		var version, position, available, attempts int64
		if err := rows.Scan(&key, &version, &owner, &lease, &position, &available, &attempts, &lastErr, &checkpoint); err != nil {
			return err.Error()
		}
		fmt.Fprintf(&b, "%s version %d owner %q lease until %s position %d of %d attempts %d last error %q checkpoint %.200s\n",
			key, version, owner, lease, position, available, attempts, lastErr, checkpoint)
	}
	if err := rows.Err(); err != nil {
		return err.Error()
	}
	return b.String()
}

// stopAll stops every worker and client gracefully and waits for them to
// exit; the exit check looks at their exit statuses.
func (s *soak) stopAll() {
	for _, tg := range s.targets {
		p := tg.current()
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		s.mu.Lock()
		s.termed[p.name] = true
		s.mu.Unlock()
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !isDone(p.done) {
			s.t.Errorf("stopping %s: %v", p.name, err)
		}
	}
	for _, p := range s.procs() {
		if err := waitExit(p, time.Minute); err != nil {
			s.t.Fatal(err)
		}
	}
}

// procs are every worker and client process the soak started.
func (s *soak) procs() []*proc {
	s.r.mu.Lock()
	out := slices.Clone(s.r.workers)
	s.r.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	return append(out, s.clients...)
}

// checkExits: a process the soak did not SIGKILL exits 0, whether it was
// stopped by a fault (SIGTERM) or at the end. Workers ride out database
// outages, partitions and resets; they do not exit on their own. A process
// sent SIGTERM so soon after its start that it had not yet set up its
// handling of the signal dies of it, holding nothing: allowed.
func (s *soak) checkExits() checkResult {
	res := checkResult{Name: "processes exiting non-zero on their own (not SIGKILLed)"}
	for _, p := range s.procs() {
		res.Checked++
		if p.killed || p.err == nil {
			continue
		}
		var exit *exec.ExitError
		if errors.As(p.err, &exit) {
			if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM {
				s.mu.Lock()
				termed := s.termed[p.name]
				s.mu.Unlock()
				if termed {
					res.Allowed++
					continue
				}
			}
		}
		last := ""
		for _, line := range strings.Split(strings.TrimSpace(p.logs()), "\n") {
			if strings.Contains(line, `"level":"ERROR"`) || strings.Contains(line, "soakclient:") {
				last = line
			}
		}
		res.violate("%s exited with %v: %s", p.name, p.err, last)
	}
	return res
}

// check gathers the evidence and runs the checker.
func (s *soak) check() []checkResult {
	t, r := s.t, s.r
	s.r.db.SetMaxIdleConns(0)
	s.r.db.SetMaxIdleConns(2)

	// Pricing: every accepted record priced exactly once, exactly (the
	// suite's own check; it reports its discrepancies itself).
	before := r.stats.discrepancies
	r.check()
	_, total := r.progress()
	pricing := checkResult{Name: "records priced exactly once, exact amounts (export vs recomputation, SQL verification)",
		Checked: int(total)}
	for range r.stats.discrepancies - before {
		pricing.violate("discrepancy (see the errors above)")
	}

	runs, err := readJobRuns(s.jobsFile)
	if err != nil {
		t.Fatal(err)
	}
	excused := map[runKey]string{}
	for _, w := range r.workers {
		for _, line := range strings.Split(w.logs(), "\n") {
			var ev struct {
				Event string `json:"event"`
				Job   string `json:"job"`
				Slot  string `json:"slot"`
				Fence int64  `json:"fence"`
			}
			if json.Unmarshal([]byte(line), &ev) != nil {
				continue
			}
			switch ev.Event {
			case "job_lost", "job_fenced", "job_cancelled":
				slot, err := time.Parse(time.RFC3339Nano, ev.Slot)
				if err == nil {
					excused[runKey{ev.Job, slot.UnixMicro(), ev.Fence}] = ev.Event
				}
			}
		}
	}
	s.mu.Lock()
	ev := jobEvidence{Runs: runs, Faults: slices.Clone(s.faults), Excused: excused, KilledAt: s.killedAt,
		CatchUp: map[string]time.Duration{"tick": time.Second}, Leader: map[string]bool{"lead": true}}
	s.mu.Unlock()
	results := []checkResult{pricing}
	results = append(results, checkJobs(ev)...)
	results = append(results, checkLeaders(s.leaderWrites())...)
	holds, counters := s.lockHolds()
	results = append(results, checkLocks(holds, counters)...)

	results = append(results, s.checkExits())
	problems := checkResult{Name: "injection problems (a fault not applied or not undone)"}
	s.mu.Lock()
	problems.Checked = len(s.faults)
	problems.Violations = slices.Clone(s.problems)
	s.mu.Unlock()
	return append(results, problems)
}

func readJobRuns(path string) ([]jobRun, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("the jobs' evidence: %w", err)
	}
	defer f.Close()
	type line struct {
		Event  string `json:"ev"`
		Job    string `json:"job"`
		Slot   string `json:"slot"`
		Fence  int64  `json:"fence"`
		Worker string `json:"worker"`
		PID    int    `json:"pid"`
		At     int64  `json:"at"`
		How    string `json:"how"`
	}
	type key struct {
		pid   int
		job   string
		slot  string
		fence int64
	}
	runs := map[key]*jobRun{}
	var order []key
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("the jobs' evidence: %q: %w", sc.Text(), err)
		}
		k := key{l.PID, l.Job, l.Slot, l.Fence}
		switch l.Event {
		case "start":
			slot, err := time.Parse(time.RFC3339Nano, l.Slot)
			if err != nil {
				return nil, fmt.Errorf("the jobs' evidence: slot %q: %w", l.Slot, err)
			}
			worker, _, _ := strings.Cut(l.Worker, "#")
			runs[k] = &jobRun{Job: l.Job, Slot: slot, Fence: l.Fence, Worker: worker, Instance: l.Worker, PID: l.PID,
				Start: time.Unix(0, l.At)}
			order = append(order, k)
		case "end":
			if r := runs[k]; r != nil {
				r.End, r.How = time.Unix(0, l.At), l.How
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	out := make([]jobRun, 0, len(order))
	for _, k := range order {
		out = append(out, *runs[k])
	}
	return out, nil
}

func (s *soak) leaderWrites() []leaderWrite {
	rows, err := s.r.db.Query(`SELECT seq, token, owner FROM soak.leader_writes`)
	if err != nil {
		s.t.Fatal(err)
	}
	defer rows.Close()
	var out []leaderWrite
	for rows.Next() {
		var w leaderWrite
		if err := rows.Scan(&w.Seq, &w.Token, &w.Owner); err != nil {
			s.t.Fatal(err)
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		s.t.Fatal(err)
	}
	return out
}

func (s *soak) lockHolds() ([]lockHold, map[string]int64) {
	rows, err := s.r.db.Query(`SELECT key, holder, n, held_from, held_to FROM soak.lock_holds`)
	if err != nil {
		s.t.Fatal(err)
	}
	defer rows.Close()
	var out []lockHold
	for rows.Next() {
		var h lockHold
		if err := rows.Scan(&h.Key, &h.Holder, &h.N, &h.From, &h.To); err != nil {
			s.t.Fatal(err)
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		s.t.Fatal(err)
	}
	counters := map[string]int64{}
	crows, err := s.r.db.Query(`SELECT key, n FROM soak.lock_counters`)
	if err != nil {
		s.t.Fatal(err)
	}
	defer crows.Close()
	for crows.Next() {
		var k string
		var n int64
		if err := crows.Scan(&k, &n); err != nil {
			s.t.Fatal(err)
		}
		counters[k] = n
	}
	return out, counters
}

// report prints the soak's table and fails the test on any violation.
func (s *soak) report(results []checkResult, phases string, wall time.Duration) {
	t := s.t
	var b strings.Builder
	fmt.Fprintf(&b, "\nsoak summary (seed %d; replay in e2e/: BATON_SEED=%d BATON_SOAK_FAULTS=%d%s%s go test ./faults -run '^TestSoak$' -v)\n",
		s.seed, s.seed, s.cfg.faults, map[bool]string{true: " BATON_SOAK=1", false: ""}[s.cfg.full],
		map[bool]string{true: " BATON_SOAK_HA=1", false: ""}[s.paf != nil])
	fmt.Fprintf(&b, "wall time %s (%s); %d workers and %d soak clients, each behind its own proxy; up to %d faults at once, %s and operator faults beside them\n\n",
		wall.Round(time.Second), phases, s.cfg.workers, s.cfg.clients, s.cfg.injectors,
		map[bool]string{true: "killed primaries of a three-node pg_auto_failover formation", false: "database restarts"}[s.paf != nil])

	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "fault\tworkers\tclients\tdatabase\toperator\ttotal\t")
	kinds := make([]string, 0, len(s.kinds))
	for k := range s.kinds {
		if k != "concurrent_load" {
			kinds = append(kinds, k)
		}
	}
	sort.Strings(kinds)
	var sum [5]int
	cell := func(n int) string {
		if n == 0 {
			return "-"
		}
		return strconv.Itoa(n)
	}
	for _, k := range kinds {
		m := s.kinds[k]
		total := m["worker"] + m["client"] + m["database"] + m["operator"]
		sum[0] += m["worker"]
		sum[1] += m["client"]
		sum[2] += m["database"]
		sum[3] += m["operator"]
		sum[4] += total
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t\n", k, cell(m["worker"]), cell(m["client"]), cell(m["database"]), cell(m["operator"]), total)
	}
	fmt.Fprintf(tw, "all faults\t%d\t%d\t%d\t%d\t%d\t\n", sum[0], sum[1], sum[2], sum[3], sum[4])
	fmt.Fprintf(tw, "concurrent loads (worker load), besides\t\t\t\t\t%d\t\n", s.loads)
	tw.Flush()

	runs, _ := readJobRuns(s.jobsFile)
	perJob := map[string]int{}
	for _, r := range runs {
		perJob[r.Job]++
	}
	writes := s.leaderWrites()
	tokens := map[int64]bool{}
	for _, w := range writes {
		tokens[w.Token] = true
	}
	holds, _ := s.lockHolds()
	_, records := s.r.progress()
	fmt.Fprintf(&b, "\nwork done under the faults: %d records priced from %d files (%d load attempts failed and were repeated); job runs tick %d, lead %d, slow %d; %d leaders wrote %d fenced writes; %d entity-lock holds on %d keys\n",
		records, len(s.r.inputs), s.loadFails, perJob["tick"], perJob["lead"], perJob["slow"], len(tokens), len(writes), len(holds), len(soakLockKeys))
	s.mu.Lock()
	fmt.Fprintf(&b, "operator faults: %d re-ratings (tier changes, re-pricings, amendments: %d amended files) rewound contracts under the workers; %d loads pruned (%d prunes refused, their records not all priced yet); %d pruned files loaded again, every record skipped as re-delivered; %d operator commands repeated after a database failure\n",
		s.kinds["tier_change"]["operator"]+s.kinds["reprice"]["operator"]+s.kinds["amend"]["operator"], len(s.r.amendFiles),
		len(s.r.prunedFiles), s.pruneSkips, s.redeliveredPruned, s.opFails)
	s.mu.Unlock()
	if len(s.failovers) > 0 {
		fmt.Fprintf(&b, "failover after a killed primary (kill → another node accepting writes, %d failovers): p50 %s, max %s\n",
			len(s.failovers), percentile(s.failovers, 0.5).Round(time.Millisecond), percentile(s.failovers, 1).Round(time.Millisecond))
	}
	b.WriteString(takeoverReport(s.takeovers()))

	fmt.Fprintln(&b)
	tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "check\tchecked\tallowed\tviolations")
	violations := 0
	for _, c := range results {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\n", c.Name, c.Checked, cell(c.Allowed), len(c.Violations))
		violations += len(c.Violations)
	}
	tw.Flush()
	fmt.Fprintf(&b, "(allowed: slots run again after a fault on their runner or a lease it reported lost; runs overlapping while the earlier runner was paused;\n"+
		" processes dying of a SIGTERM sent before they had set up their handling of it)\n")
	fmt.Fprintf(&b, "\nviolations: %d\n", violations)
	t.Log(b.String())
	note("soak: %d faults (%d on workers, %d on clients, %d database restarts, %d operator) and %d loads in %s; %d checks, %d violations; seed %d",
		sum[4], sum[0], sum[1], sum[2], sum[3], s.loads, wall.Round(time.Second), len(results), violations, s.seed)
	for _, c := range results {
		for i, v := range c.Violations {
			if i == 20 {
				t.Errorf("%s: %d more", c.Name, len(c.Violations)-20)
				break
			}
			t.Errorf("%s: %s", c.Name, v)
		}
	}
	if got := s.injected.Load(); got < int64(s.cfg.faults) {
		t.Errorf("%d faults injected, want %d", got, s.cfg.faults)
	}
	if t.Failed() {
		s.keepEvidence()
	}
}

// keepEvidence copies what the checker read, every process's log and the
// database server's log (passwords redacted) out of the test's temporary
// directory, for a failed run to be looked into.
func (s *soak) keepEvidence() {
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("baton-soak-%d", s.seed))
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		s.t.Logf("keeping the evidence: %v", err)
		return
	}
	var errs []error
	if b, err := os.ReadFile(s.jobsFile); err == nil {
		errs = append(errs, os.WriteFile(filepath.Join(dir, "jobs.jsonl"), b, 0o644))
	}
	var faults strings.Builder
	s.mu.Lock()
	for _, f := range s.faults {
		fmt.Fprintf(&faults, "%s\t%s\t%s\t%s\n", f.Kind, cmp.Or(f.Target, "database"),
			f.Start.Format(time.RFC3339Nano), f.End.Format(time.RFC3339Nano))
	}
	s.mu.Unlock()
	errs = append(errs, os.WriteFile(filepath.Join(dir, "faults.tsv"), []byte(faults.String()), 0o644))
	clean := s.redactor()
	for _, p := range s.procs() {
		errs = append(errs, os.WriteFile(filepath.Join(dir, "logs", p.name+".log"), []byte(clean(p.logs())), 0o644))
	}
	errs = append(errs, s.keepServerLogs(dir))
	if err := errors.Join(errs...); err != nil {
		s.t.Logf("keeping the evidence: %v", err)
	}
	s.t.Logf("the jobs' evidence, the fault log (faults.tsv), every process's log (logs/) and the database's (server/) are kept in %s", dir)
}
