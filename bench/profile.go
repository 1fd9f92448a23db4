package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/pricing/pricer"
)

// Where baton misses its throughput goal, the report explains why with
// profiles of a 2-worker pricing run on a smaller copy of the same data
// (same 1,000 records per contract, fewer contracts):
//
//   - perf: system-wide sampling while real worker processes run, reported
//     for this run's processes only (the workers and the server's
//     backends), split by process and by function;
//   - pprof: the same job priced by two distributors inside this process
//     under runtime/pprof, for the Go side;
//   - an experiment: the same in-process run with the database driver's
//     query mode changed, to measure the cost of how statements are sent.

type profileResult struct {
	Target  string `json:"target"`
	Name    string `json:"name"`
	Command string `json:"command"`
	Text    string `json:"text"`
}

// modeRun is one in-process pricing run with a given pgx query mode.
type modeRun struct {
	Target   string  `json:"target"`
	Mode     string  `json:"mode"`
	Records  int64   `json:"records"`
	Seconds  float64 `json:"seconds"`
	PerSec   float64 `json:"records_per_s"`
	CPU      cpuUse  `json:"cpu"`
	Verified bool    `json:"verified"`
}

// profileNeeded says whether a throughput goal was missed.
func profileNeeded(res *results) bool {
	t := res.Throughput
	if t == nil {
		return false
	}
	ceil, ok := t.ceiling()
	r2, ok2 := t.median("baton", 2)
	return ok && ok2 && r2.PerSec/ceil.PerSec < 0.5
}

// profileTarget is one workload profiled: what it is, its data, and
// whether a goal it bears on was missed.
type profileTarget struct {
	label  string
	data   func(context.Context) (*dataset, error)
	missed bool
	reps   int // runs of each query mode
}

// claimShort says whether claims per second fell short of the comparison
// point (db-scheduler's 2,000 executions/s).
func claimShort(res *results) bool {
	c := res.Coord
	if c == nil {
		return false
	}
	best := 0.0
	for _, cl := range c.Claims {
		best = max(best, cl.PerSec)
	}
	if c.Tiny != nil {
		best = max(best, c.Tiny.PerSec)
	}
	return best < 2000
}

func (e *env) runProfiles(ctx context.Context, res *results) error {
	if e.cfg.profile == "never" {
		return nil
	}
	always := e.cfg.profile == "always"
	targets := []profileTarget{
		{"pricing (records per contract as in §1)", func(ctx context.Context) (*dataset, error) {
			return e.seedTemplate(ctx, "profile", min(e.cfg.contracts, 200), e.cfg.perContract)
		}, profileNeeded(res), 2},
		{"claim path (one-record contracts)", func(ctx context.Context) (*dataset, error) {
			return e.seedTemplate(ctx, "tiny", e.cfg.tinyContracts, 1)
		}, claimShort(res), 1},
	}
	var errs []string
	for _, t := range targets {
		if !always && !t.missed {
			continue
		}
		if err := e.profileTarget(ctx, res, t); err != nil {
			errs = append(errs, t.label+": "+err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

func (e *env) profileTarget(ctx context.Context, res *results, t profileTarget) error {
	ds, err := t.data(ctx)
	if err != nil {
		return err
	}
	log.Printf("profiles: %s (%d contracts × %d records)", t.label, ds.Contracts, ds.PerContract)
	var errs []string
	if p, err := e.perfProfile(ctx, ds, res); err != nil {
		errs = append(errs, "perf: "+err.Error())
	} else {
		for i := range p {
			p[i].Target = t.label
		}
		res.Profiles = append(res.Profiles, p...)
	}
	modes := []struct {
		name string
		mode pgx.QueryExecMode
	}{
		{"as shipped (dbconn.Open: cache_statement)", -1},
		{"exec (one unnamed statement per query)", pgx.QueryExecModeExec},
		{"simple_protocol", pgx.QueryExecModeSimpleProtocol},
	}
	// Interleaved and repeated: the machine is shared, so alternate the
	// modes rather than run each in one block. The first run is profiled.
	reps := t.reps
	if e.cfg.quick {
		reps = 1
	}
	for rep := range reps {
		for i, m := range modes {
			var prof io.Writer
			var path string
			if rep == 0 && i == 0 {
				path = filepath.Join(e.tmp, "cpu-"+ds.Name+".pprof")
				f, err := os.Create(path)
				if err != nil {
					return err
				}
				defer f.Close()
				prof = f
			}
			r, err := e.inProcess(ctx, ds, m.name, m.mode, 2, prof)
			if err != nil {
				errs = append(errs, fmt.Sprintf("in-process run (%s): %v", m.name, err))
				continue
			}
			r.Target = t.label
			log.Printf("profiles: in-process, %s: %.0f records/s", m.name, r.PerSec)
			res.Experiments = append(res.Experiments, r)
			if path == "" {
				continue
			}
			out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=30", path).CombinedOutput()
			if err != nil {
				errs = append(errs, fmt.Sprintf("go tool pprof: %v: %s", err, out))
				continue
			}
			res.Profiles = append(res.Profiles, profileResult{Target: t.label, Name: "pprof: two in-process distributors (Go side)",
				Command: "go tool pprof -top -nodecount=30 cpu.pprof", Text: trimPprof(string(out))})
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

func trimPprof(s string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "File:") || strings.HasPrefix(l, "Build ID:") {
			continue
		}
		keep = append(keep, l)
	}
	return strings.TrimSpace(strings.Join(keep, "\n"))
}

// openMode opens the database like dbconn.Open does for a worker, but with
// the given pgx query mode (-1: dbconn.Open itself).
func openMode(ctx context.Context, url string, mode pgx.QueryExecMode, conns int) (*dbconn.DB, error) {
	cfg := distributor.Config{}
	stmt, lock, idle := cfg.ConnectionLimits()
	opts := dbconn.Options{ApplicationName: "bench-inprocess", StatementTimeout: stmt, LockTimeout: lock,
		IdleInTransactionTimeout: idle, MaxOpenConns: conns}
	if mode < 0 {
		return dbconn.Open(url, opts)
	}
	pc, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	pc.DefaultQueryExecMode = mode
	p := pc.RuntimeParams
	p["application_name"] = opts.ApplicationName
	p["statement_timeout"] = strconv.FormatInt(stmt.Milliseconds(), 10)
	p["lock_timeout"] = strconv.FormatInt(lock.Milliseconds(), 10)
	p["idle_in_transaction_session_timeout"] = strconv.FormatInt(idle.Milliseconds(), 10)
	sqldb := stdlib.OpenDB(*pc)
	sqldb.SetMaxOpenConns(conns)
	sqldb.SetMaxIdleConns(conns)
	// Direct, with the timeouts as session settings: nothing to set per
	// transaction.
	return dbconn.Wrap(ctx, bun.NewDB(sqldb, pgdialect.New()), dbconn.Access{})
}

// inProcess prices a fresh copy of ds with n distributors in this process.
func (e *env) inProcess(ctx context.Context, ds *dataset, name string, mode pgx.QueryExecMode, n int, prof io.Writer) (modeRun, error) {
	r := modeRun{Mode: name, Records: ds.Records}
	dbname, db, err := e.fresh(ctx, ds.template, "inproc")
	if err != nil {
		return r, err
	}
	defer func() { db.Close(); e.dropDB(ctx, dbname) }()
	var ds2 []*distributor.Distributor
	var dbs []*dbconn.DB
	defer func() {
		for _, d := range dbs {
			d.Close()
		}
	}()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for i := range n {
		wdb, err := openMode(ctx, e.url(dbname), mode, distributor.MaxPartitionsDefault+4)
		if err != nil {
			return r, err
		}
		dbs = append(dbs, wdb)
		d, err := distributor.New(wdb, pricer.NewStore(wdb, "").Processor(), distributor.Config{Name: fmt.Sprintf("inproc-%d", i+1),
			UntilDone: true, KeyAttr: "contract_id", Logger: quiet})
		if err != nil {
			return r, err
		}
		ds2 = append(ds2, d)
	}
	e.checkpoint(ctx)
	if prof != nil {
		if err := pprof.StartCPUProfile(prof); err != nil {
			return r, err
		}
	}
	m := startCPU(e.cpu)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, d := range ds2 {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = d.Run(ctx) }()
	}
	wg.Wait()
	r.Seconds = time.Since(start).Seconds()
	r.CPU = m.stop()
	if prof != nil {
		pprof.StopCPUProfile()
	}
	for _, err := range errs {
		if err != nil {
			return r, err
		}
	}
	r.PerSec = float64(ds.Records) / r.Seconds
	bad, err := verify(ctx, db)
	if err != nil {
		return r, err
	}
	r.Verified = bad == 0
	return r, nil
}

// perfProfile samples the whole machine with perf while two worker
// processes price ds, and reports this run's processes only.
func (e *env) perfProfile(ctx context.Context, ds *dataset, res *results) ([]profileResult, error) {
	perf, err := exec.LookPath("perf")
	if err != nil {
		return nil, fmt.Errorf("perf is not installed (apt-get install linux-perf)")
	}
	if e.cpu == nil {
		return nil, fmt.Errorf("the server's processes are not on this machine")
	}
	name, db, err := e.fresh(ctx, ds.template, "perf")
	if err != nil {
		return nil, err
	}
	defer func() { db.Close(); e.dropDB(ctx, name) }()
	data := filepath.Join(e.tmp, "perf.data")
	rec := exec.CommandContext(ctx, perf, "record", "-a", "-F", "999", "-o", data)
	rec.Stdout, rec.Stderr = io.Discard, io.Discard
	e.checkpoint(ctx)
	if err := rec.Start(); err != nil {
		return nil, fmt.Errorf("starting perf record: %w", err)
	}
	time.Sleep(500 * time.Millisecond)
	pgPids := map[int]bool{e.cpu.postmaster: true}
	logDir := filepath.Join(e.tmp, "logs", "perf")
	args := designBaton.workerArgs(0, nil, 0)
	var ps []*proc
	for i := 1; i <= 2; i++ {
		p, err := e.startBaton(e.url(name), logDir, fmt.Sprintf("w%d", i), args...)
		if err != nil {
			killAll(ps)
			_ = rec.Process.Signal(syscall.SIGINT)
			_ = rec.Wait()
			return nil, err
		}
		ps = append(ps, p)
	}
	done := make(chan error, 1)
	go func() { done <- waitAll(ps, 10*time.Minute) }()
	tick := time.NewTicker(100 * time.Millisecond)
	var werr error
loop:
	for {
		select {
		case werr = <-done:
			break loop
		case <-tick.C:
			for _, pid := range e.cpu.backends() {
				pgPids[pid] = true
			}
		}
	}
	tick.Stop()
	_ = rec.Process.Signal(syscall.SIGINT)
	_ = rec.Wait()
	if werr != nil {
		return nil, werr
	}
	workerPids := map[int]bool{}
	for _, p := range ps {
		workerPids[p.cmd.Process.Pid] = true
	}
	script, err := exec.CommandContext(ctx, perf, "script", "-i", data, "-F", "comm,pid,ip,sym,dso").Output()
	if err != nil {
		return nil, fmt.Errorf("perf script: %w", err)
	}
	prof := aggregatePerf(string(script), map[string]map[int]bool{"server": pgPids, "workers": workerPids})
	res.addCommand("perf record -a -F 999 (during a 2-worker run of the profile data set); perf script -F comm,pid,ip,sym,dso")
	return prof, nil
}

var perfLine = regexp.MustCompile(`^\s*(\S+)\s+(\d+)\s+[0-9a-f]+\s+(.*)\s+\((.*)\)\s*$`)

const otherProcs = "other processes on the machine"

// aggregatePerf counts perf samples of the processes in each class: the
// split between classes (and everything else on the machine), then each
// class's top functions.
func aggregatePerf(script string, classes map[string]map[int]bool) []profileResult {
	total := 0
	byClass := map[string]int{}
	bySym := map[string]map[string]int{}
	kernel := map[string]int{}
	for _, l := range strings.Split(script, "\n") {
		m := perfLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		total++
		pid, _ := strconv.Atoi(m[2])
		class := otherProcs
		for c, pids := range classes {
			if pids[pid] {
				class = c
			}
		}
		byClass[class]++
		if class == otherProcs {
			continue
		}
		sym, dso := m[3], filepath.Base(m[4])
		if sym == "[unknown]" {
			sym = "[unknown in " + dso + "]"
		}
		if dso == "[kernel.kallsyms]" {
			kernel[class]++
			sym = "[k] " + sym
		}
		if bySym[class] == nil {
			bySym[class] = map[string]int{}
		}
		bySym[class][sym]++
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d samples at 999 Hz on all CPUs\n", total)
	for _, kv := range sortedCounts(byClass) {
		fmt.Fprintf(&b, "%6.1f%%  %s\n", 100*float64(kv.n)/float64(max(total, 1)), kv.k)
	}
	out := []profileResult{{Name: "perf: CPU samples by process class", Command: "perf record -a -F 999; perf script", Text: b.String()}}
	for _, class := range []string{"server", "workers"} {
		n := byClass[class]
		if n == 0 {
			continue
		}
		var t strings.Builder
		fmt.Fprintf(&t, "%d samples; %.1f%% in the kernel\n", n, 100*float64(kernel[class])/float64(n))
		for i, kv := range sortedCounts(bySym[class]) {
			if i == 30 {
				break
			}
			fmt.Fprintf(&t, "%6.2f%%  %s\n", 100*float64(kv.n)/float64(n), kv.k)
		}
		out = append(out, profileResult{Name: "perf: " + class + ", by function", Command: "perf script, samples of this run's " + class, Text: t.String()})
	}
	return out
}

type countKV struct {
	k string
	n int
}

func sortedCounts(m map[string]int) []countKV {
	out := make([]countKV, 0, len(m))
	for k, n := range m {
		out = append(out, countKV{k, n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].n > out[j].n || out[i].n == out[j].n && out[i].k < out[j].k })
	return out
}
