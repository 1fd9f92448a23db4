package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/pricing/pricer"
)

// The horizon scenario: the same pricing run with and without another
// session holding a REPEATABLE READ snapshot open for the whole run (a long
// report, say), back to back. While that snapshot is open, no row version
// deleted or updated after it was taken can be vacuumed or pruned, so
// every version a run writes stays; what matters is how many versions
// each task-row change leaves and how many of them the protocol's
// statements have to walk past. Optionally a soak follows: workers
// pricing what a producer loads at a steady rate, for a long time, with
// the horizon pinned throughout, sampled every window.

// horizonRun is one pricing run, pinned or not.
type horizonRun struct {
	Pinned  bool    `json:"pinned"`
	Rep     int     `json:"rep"`
	Records int64   `json:"records"`
	Seconds float64 `json:"seconds"` // first worker started → last exited
	PerSec  float64 `json:"records_per_s"`
	// CPU is the server's and the workers' CPU time over the run: the
	// work the pin costs, which the wall clock of a machine shared with
	// other work shows only through its noise.
	CPU cpuUse `json:"cpu"`
	// Heartbeat and Commit are the workers' own histograms
	// (baton_heartbeat_seconds, baton_batch_commit_seconds), summed over
	// the workers: p50 and p99 in ms, interpolated within buckets.
	HeartbeatP50 float64 `json:"heartbeat_p50_ms"`
	HeartbeatP99 float64 `json:"heartbeat_p99_ms"`
	Heartbeats   float64 `json:"heartbeats"`
	CommitP99    float64 `json:"batch_commit_p99_ms"`
	// ClaimRead is a claim round's reads (fair share, candidates, stale
	// candidates: the statements every worker runs at every poll), timed
	// by the bench every 100 ms on its own connection during the run.
	ClaimRead dist `json:"claim_read"`
	// FairShare is the fair-share read alone, from the same samples.
	FairShare  dist         `json:"fair_share"`
	Tables     []tableStats `json:"tables"`
	Statements []stmtKind   `json:"statements,omitempty"`
	// RawStatements are the statements that took the most time, as
	// pg_stat_statements has them, with the buffers each call touched.
	RawStatements []stmtRaw `json:"raw_statements,omitempty"`
	// PinHeld says the pinning session still held its snapshot at the end
	// (backend_xmin set), so the horizon was pinned for the whole run.
	PinHeld  bool   `json:"pin_held,omitempty"`
	Verified bool   `json:"verified"`
	Command  string `json:"command"`
}

// horizonResult is the horizon scenario's measurements: pricing while
// another session pins the xmin horizon, against the same run unpinned.
type horizonResult struct {
	Dataset *dataset     `json:"dataset"`
	Workers int          `json:"workers"`
	Batch   int          `json:"batch_size"`
	Runs    []horizonRun `json:"runs"`
	Soak    *soakResult  `json:"soak,omitempty"`
}

// ratio is the median over repetitions of pinned ÷ unpinned records/s.
func (h *horizonResult) ratio() float64 {
	return h.medianRatio(func(r horizonRun) float64 { return r.PerSec })
}

// cpuRatio is the median over repetitions of pinned ÷ unpinned CPU
// seconds (server and workers); 0 when not measurable.
func (h *horizonResult) cpuRatio() float64 {
	for _, r := range h.Runs {
		if r.CPU.DB < 0 {
			return 0
		}
	}
	return h.medianRatio(func(r horizonRun) float64 { return r.CPU.DB + r.CPU.Workers })
}

// medianRatio is the median over repetitions of f(pinned) ÷ f(unpinned).
func (h *horizonResult) medianRatio(f func(horizonRun) float64) float64 {
	var pinned, free []float64
	for _, r := range h.Runs {
		if r.Pinned {
			pinned = append(pinned, f(r))
		} else {
			free = append(free, f(r))
		}
	}
	var rs []float64
	for i := range min(len(pinned), len(free)) {
		if free[i] > 0 {
			rs = append(rs, pinned[i]/free[i])
		}
	}
	if len(rs) == 0 {
		return 0
	}
	slices.Sort(rs)
	if n := len(rs); n%2 == 0 {
		return (rs[n/2-1] + rs[n/2]) / 2
	}
	return rs[len(rs)/2]
}

// runHorizon measures pricing with and without a pinned horizon.
func (e *env) runHorizon(ctx context.Context, res *results) error {
	c := e.cfg.horizon.scaled(e.cfg.quick)
	ds, err := e.seedTemplate(ctx, "horizon", c.contracts.v, c.perContract.v)
	if err != nil {
		return err
	}
	h := &horizonResult{Dataset: ds, Workers: c.workers.v, Batch: c.batch.v}
	res.Horizon = h
	for rep := 1; rep <= c.repeat.v; rep++ {
		order := []bool{false, true}
		if rep%2 == 0 {
			order = []bool{true, false}
		}
		for _, pinned := range order {
			r, err := e.horizonRun(ctx, ds, c, pinned, rep, res)
			if err != nil {
				return err
			}
			h.Runs = append(h.Runs, r)
		}
	}
	log.Printf("horizon: pinned ÷ unpinned = %.3f (CPU time: %.3f)", h.ratio(), h.cpuRatio())
	if c.soak > 0 {
		s, err := e.runSoak(ctx, c, res)
		h.Soak = s
		if err != nil {
			return fmt.Errorf("soak: %w", err)
		}
	}
	return nil
}

// pin opens a session on db that takes a REPEATABLE READ snapshot and
// keeps it: the xmin horizon of db's tables stays where it is until the
// returned function ends the transaction. held reports whether the
// snapshot is still held.
func pin(ctx context.Context, db *bun.DB) (release func(), held func() bool, err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("opening the pinning session: %w", err)
	}
	if _, err := conn.ExecContext(ctx, `BEGIN ISOLATION LEVEL REPEATABLE READ`); err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("pinning the horizon: %w", err)
	}
	var one int
	if err := conn.QueryRowContext(ctx, `SELECT 1 FROM baton.tasks LIMIT 1`).Scan(&one); err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("pinning the horizon: %w", err)
	}
	var pid int
	if err := conn.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("pinning the horizon: %w", err)
	}
	held = func() bool {
		var xmin sql.NullString
		err := db.QueryRowContext(ctx, `SELECT backend_xmin::text FROM pg_stat_activity WHERE pid = ?`, pid).Scan(&xmin)
		return err == nil && xmin.Valid
	}
	release = func() {
		_, _ = conn.ExecContext(context.Background(), `ROLLBACK`)
		conn.Close()
	}
	return release, held, nil
}

// prober times a claim round's reads every interval until stopped.
type prober struct {
	mu        sync.Mutex
	round     []time.Duration
	fairShare []time.Duration
	errs      int
	stop      chan struct{}
	done      chan struct{}
}

func startProber(db *bun.DB, every time.Duration) *prober {
	p := &prober{stop: make(chan struct{}), done: make(chan struct{})}
	store := taskstore.NewStore(db, "").Kind(pricer.Kind)
	go func() {
		defer close(p.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			t0 := time.Now()
			_, err := store.FairShareLoad(ctx, "bench-probe", distributor.MaxPartitionsDefault, distributor.StaleAfterDefault)
			fs := time.Since(t0)
			if err == nil {
				_, err = store.StaleCandidates(ctx, distributor.MaxPartitionsDefault)
			}
			if err == nil {
				_, err = store.Candidates(ctx, 4*distributor.MaxPartitionsDefault)
			}
			all := time.Since(t0)
			cancel()
			p.mu.Lock()
			if err != nil {
				p.errs++
			} else {
				p.round = append(p.round, all)
				p.fairShare = append(p.fairShare, fs)
			}
			p.mu.Unlock()
		}
	}()
	return p
}

// take returns the samples so far and starts over.
func (p *prober) take() (round, fairShare []time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	round, fairShare = p.round, p.fairShare
	p.round, p.fairShare = nil, nil
	return round, fairShare
}

func (p *prober) close() {
	close(p.stop)
	<-p.done
}

// horizonArgs are the workers' arguments.
func horizonArgs(c horizonConfig, untilDone bool) []string {
	args := []string{"--batch-size", strconv.Itoa(c.batch.v), "--metrics-addr", "127.0.0.1:0"}
	if untilDone {
		args = append([]string{"--until-done"}, args...)
	}
	return args
}

// horizonRun prices a fresh copy of ds with c.workers worker processes,
// with the horizon pinned or not, and reads what the run left behind.
func (e *env) horizonRun(ctx context.Context, ds *dataset, c horizonConfig, pinned bool, rep int, res *results) (horizonRun, error) {
	r := horizonRun{Pinned: pinned, Rep: rep, Records: ds.Records}
	label := "unpinned"
	if pinned {
		label = "pinned"
	}
	name, db, err := e.fresh(ctx, ds.template, "horizon")
	if err != nil {
		return r, err
	}
	defer func() { db.Close(); e.dropDB(ctx, name) }()
	args := horizonArgs(c, true)
	r.Command = e.commandFor(designBaton, "w1", args)
	res.addCommand(r.Command)
	e.checkpoint(ctx)
	_ = e.resetStatements(ctx)
	var pinHeld func() bool
	if pinned {
		release, held, err := pin(ctx, db)
		if err != nil {
			return r, err
		}
		defer release()
		pinHeld = held
	}
	log.Printf("horizon: %d×%d records, %d workers, --batch-size %d, %s, run %d",
		ds.Contracts, ds.PerContract, c.workers.v, c.batch.v, label, rep)
	logDir := filepath.Join(e.tmp, "logs", fmt.Sprintf("horizon-%s-%d", label, rep))
	sc := newScraper()
	probe := startProber(db, 100*time.Millisecond)
	meter := startCPU(e.cpu)
	start := time.Now()
	var ps []*proc
	for i := 1; i <= c.workers.v; i++ {
		p, err := e.startBaton(e.url(name), logDir, "w"+strconv.Itoa(i), args...)
		if err != nil {
			killAll(ps)
			probe.close()
			sc.close()
			return r, err
		}
		ps = append(ps, p)
		sc.watch(p, 250*time.Millisecond)
	}
	werr := waitAll(ps, 30*time.Minute)
	probe.close()
	sc.close()
	if pinHeld != nil {
		r.PinHeld = pinHeld()
	}
	var last time.Time
	for _, p := range ps {
		if p.exited.After(last) {
			last = p.exited
		}
	}
	r.Seconds = last.Sub(start).Seconds()
	r.PerSec = float64(ds.Records) / r.Seconds
	r.CPU = meter.stop()
	r.CPU.Workers = workersCPU(ps)
	if werr != nil {
		return r, werr
	}
	if err := failed(ps, nil); err != nil {
		return r, err
	}
	m := sc.total()
	r.HeartbeatP50, r.HeartbeatP99 = m.Heartbeat.quantileMs(0.5), m.Heartbeat.quantileMs(0.99)
	r.Heartbeats = m.Heartbeat.Count
	r.CommitP99 = m.Commit.quantileMs(0.99)
	round, fs := probe.take()
	r.ClaimRead, r.FairShare = summarize(round), summarize(fs)
	if r.Tables, err = readTableStats(ctx, db); err != nil {
		return r, err
	}
	if st, err := e.statements(ctx, name); err == nil {
		r.Statements = st
	}
	if st, err := e.rawStatements(ctx, name, 20); err == nil {
		r.RawStatements = st
	}
	sum, err := verifyPricing(ctx, db)
	if err != nil {
		return r, err
	}
	r.Verified = len(sum.Mismatches) == 0 && sum.Priced == sum.Records && sum.Records == ds.Records
	tasks := findTable(r.Tables, "tasks")
	log.Printf("horizon: %s: %.0f records/s in %.1fs, CPU %.1fs database + %.1fs workers; heartbeat p99 %.1f ms; claim reads p99 %.1f ms; tasks: %d dead, %d of %d updates HOT; verified=%v",
		label, r.PerSec, r.Seconds, r.CPU.DB, r.CPU.Workers, r.HeartbeatP99, r.ClaimRead.P99, tasks.Dead, tasks.HotUpdated, tasks.Updated, r.Verified)
	if !r.Verified {
		return r, fmt.Errorf("horizon %s: output failed verification: %d mismatching contracts, %d of %d priced",
			label, len(sum.Mismatches), sum.Priced, sum.Records)
	}
	return r, nil
}

func horizonSection(w writer, r *results) {
	h := r.Horizon
	if h == nil || h.Dataset == nil {
		return
	}
	w("## Pinned xmin horizon\n\n")
	w("The same pricing run (%d contracts × %d records, %d workers, `--batch-size %d`) with and without another session holding a REPEATABLE READ snapshot open for the whole run (`BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1 FROM baton.tasks LIMIT 1`, kept open), back to back on fresh copies of the data. While the snapshot is held no row version written after it can be vacuumed or pruned. Latencies: heartbeats and batch commits from the workers' own histograms (interpolated within buckets); claim-round reads (fair share + stale candidates + candidates, as every poll runs them) timed by the bench every 100 ms during the run. Tables after the run from `pg_stat_user_tables`.\n\n",
		h.Dataset.Contracts, h.Dataset.PerContract, h.Workers, h.Batch)
	ratio := h.ratio()
	w("**Throughput pinned ÷ unpinned: %.3f** (goal ≥ 0.9: %s).", ratio, yesNo(ratio >= 0.9))
	if c := h.cpuRatio(); c > 0 {
		w(" CPU time (database + workers) pinned ÷ unpinned: %.3f.", c)
	}
	w("\n\n")
	w("| run | records/s | s | CPU s (database + workers) | heartbeat p50 / p99 | batch commit p99 | claim reads p50 / p99 | fair-share read p99 | tasks dead versions | tasks HOT updates | tasks heap + indexes | workers dead | autovacuum passes (all tables) | events rows |\n")
	w("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, run := range h.Runs {
		label := "unpinned"
		if run.Pinned {
			label = "pinned"
			if !run.PinHeld {
				label += " (snapshot lost)"
			}
		}
		t, wk, ev := findTable(run.Tables, "tasks"), findTable(run.Tables, "workers"), findTable(run.Tables, "events")
		cpu := "—"
		if run.CPU.DB >= 0 {
			cpu = fmt.Sprintf("%.1f + %.1f", run.CPU.DB, run.CPU.Workers)
		}
		var vacuums int64
		for _, t := range run.Tables {
			vacuums += t.Vacuums
		}
		w("| %s #%d | %s | %.1f | %s | %s / %s | %s | %s / %s | %s | %d | %d of %d (%s) | %s + %s | %d | %d | %d |\n",
			label, run.Rep, rate(run.PerSec), run.Seconds, cpu, ms1(run.HeartbeatP50), ms1(run.HeartbeatP99), ms1(run.CommitP99),
			ms1(run.ClaimRead.P50), ms1(run.ClaimRead.P99), ms1(run.FairShare.P99),
			t.Dead, t.HotUpdated, t.Updated, pct(t.hotShare()), mib(t.HeapBytes), mib(t.IndexBytes), wk.Dead, vacuums, ev.Inserted)
	}
	w("\n")
	// The statements whose cost the pin changed most, per run.
	for _, run := range h.Runs {
		if len(run.Statements) == 0 {
			continue
		}
		label := "unpinned"
		if run.Pinned {
			label = "pinned"
		}
		w("<details><summary>statements, %s #%d (pg_stat_statements)</summary>\n\n| statement | calls | total ms | mean ms |\n|---|---|---|---|\n", label, run.Rep)
		for i, s := range run.Statements {
			if i == 12 {
				break
			}
			w("| %s | %d | %.0f | %.3f |\n", s.Kind, s.Calls, s.TotalMs, s.MeanMs())
		}
		w("\n</details>\n\n")
		if len(run.RawStatements) == 0 {
			continue
		}
		w("<details><summary>statements by text, %s #%d (pg_stat_statements, buffers hit or read per call)</summary>\n\n| statement | calls | total ms | mean ms | buffers per call |\n|---|---|---|---|---|\n", label, run.Rep)
		for _, s := range run.RawStatements {
			w("| `%s` | %d | %.0f | %.3f | %.1f |\n", strings.ReplaceAll(s.Query, "|", "\\|"), s.Calls, s.TotalMs, s.TotalMs/float64(max(s.Calls, 1)), s.BlocksPerCall())
		}
		w("\n</details>\n\n")
	}
	soakSection(w, h.Soak)
}

func ms1(v float64) string {
	if v < 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f ms", v)
}

func pct(v float64) string {
	if v < 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f%%", v*100)
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// intFlag is an int flag that remembers whether it was given, so -quick
// scales only what was not.
type intFlag struct {
	v   int
	set bool
}

func (f *intFlag) String() string { return strconv.Itoa(f.v) }

func (f *intFlag) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return fmt.Errorf("%q: want a positive integer", s)
	}
	f.v, f.set = n, true
	return nil
}

// horizonConfig holds the horizon scenario's knobs.
type horizonConfig struct {
	contracts   intFlag
	perContract intFlag
	batch       intFlag
	workers     intFlag
	repeat      intFlag
	// soak: 0 means no soak.
	soak          time.Duration
	soakRate      intFlag
	soakContracts intFlag
	soakWindow    time.Duration
}

func (c *horizonConfig) flags(fs *flag.FlagSet) {
	c.contracts.v, c.perContract.v, c.batch.v, c.workers.v, c.repeat.v = 2000, 300, 50, 2, 1
	c.soakRate.v, c.soakContracts.v, c.soakWindow = 1000, 200, time.Minute
	fs.Var(&c.contracts, "horizon-contracts", "horizon: contracts (default 2000; -quick 400)")
	fs.Var(&c.perContract, "horizon-records-per-contract", "horizon: records per contract (default 300; -quick 100)")
	fs.Var(&c.batch, "horizon-batch-size", "horizon: --batch-size of the workers (default 50)")
	fs.Var(&c.workers, "horizon-workers", "horizon: worker processes (default 2)")
	fs.Var(&c.repeat, "horizon-repeat", "horizon: pairs of pinned and unpinned runs, alternating which goes first (default 1)")
	fs.DurationVar(&c.soak, "horizon-soak", 0, "horizon: after the pairs, run a soak this long with the horizon pinned throughout (0: none)")
	fs.Var(&c.soakRate, "horizon-soak-rate", "horizon: records per second the soak's producer loads (default 1000)")
	fs.Var(&c.soakContracts, "horizon-soak-contracts", "horizon: contracts the soak's producer loads records for (default 200)")
	fs.DurationVar(&c.soakWindow, "horizon-soak-window", c.soakWindow, "horizon: the soak's sampling window")
}

// scaled is c with -quick's sizes for what was not set explicitly.
func (c horizonConfig) scaled(quick bool) horizonConfig {
	if !quick {
		return c
	}
	if !c.contracts.set {
		c.contracts.v = 400
	}
	if !c.perContract.set {
		c.perContract.v = 100
	}
	return c
}
