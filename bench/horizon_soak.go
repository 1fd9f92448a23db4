package main

import (
	"context"
	"fmt"
	"log"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// soakWindow is one sampling window of the soak.
type soakWindow struct {
	AtS          float64 `json:"at_s"` // end of the window, from the workers' start
	Priced       int64   `json:"priced"`
	PerSec       float64 `json:"records_per_s"`
	Backlog      int64   `json:"backlog"` // records loaded, not yet priced, at the window's end
	HeartbeatP99 float64 `json:"heartbeat_p99_ms"`
	CommitP99    float64 `json:"batch_commit_p99_ms"`
	ClaimReadP99 float64 `json:"claim_read_p99_ms"`
	ClaimReadP50 float64 `json:"claim_read_p50_ms"`
	TasksDead    int64   `json:"tasks_dead"`
	TasksHot     float64 `json:"tasks_hot_share"` // since the start
	TasksBytes   int64   `json:"tasks_bytes"`     // heap + indexes
	WorkersDead  int64   `json:"workers_dead"`
	WorkersBytes int64   `json:"workers_bytes"`
	// Statements are the statements that took the most time in the
	// window (pg_stat_statements, differences from the window before),
	// with the buffers each call touched: what grows while the horizon
	// stays pinned.
	Statements []stmtRaw `json:"statements,omitempty"`
}

// soakResult is a long run at a steady load with the horizon pinned
// throughout.
type soakResult struct {
	Seconds   float64      `json:"seconds"`
	Rate      int          `json:"rate"` // records/s asked of the producer
	Contracts int          `json:"contracts"`
	Workers   int          `json:"workers"`
	Batch     int          `json:"batch_size"`
	Windows   []soakWindow `json:"windows"`
	Produced  int64        `json:"produced"`
	Drained   bool         `json:"drained"`
	Verified  bool         `json:"verified"`
	PinHeld   bool         `json:"pin_held"`
	Command   string       `json:"command"`
}

// runSoak prices what a producer loads at c.soakRate records/s for c.soak,
// with the horizon pinned from before the first load to the end.
func (e *env) runSoak(ctx context.Context, c horizonConfig, res *results) (*soakResult, error) {
	s := &soakResult{Rate: c.soakRate.v, Contracts: c.soakContracts.v, Workers: c.workers.v, Batch: c.batch.v}
	ds, err := e.seedTemplate(ctx, "horizon_soak", c.soakContracts.v, 1)
	if err != nil {
		return s, err
	}
	name, db, err := e.fresh(ctx, ds.template, "soak")
	if err != nil {
		return s, err
	}
	defer func() { db.Close(); e.dropDB(ctx, name) }()
	release, held, err := pin(ctx, db)
	if err != nil {
		return s, err
	}
	defer release()
	args := horizonArgs(c, false)
	s.Command = e.commandFor(designBaton, "w1", args)
	res.addCommand(s.Command)
	log.Printf("horizon soak: %s at %d records/s over %d contracts, %d workers, horizon pinned", c.soak, c.soakRate.v, c.soakContracts.v, c.workers.v)
	logDir := filepath.Join(e.tmp, "logs", "horizon-soak")
	sc := newScraper()
	probe := startProber(db, 100*time.Millisecond)
	var ps []*proc
	defer func() { killAll(ps) }()
	for i := 1; i <= c.workers.v; i++ {
		p, err := e.startBaton(e.url(name), logDir, "w"+strconv.Itoa(i), args...)
		if err != nil {
			probe.close()
			sc.close()
			return s, err
		}
		ps = append(ps, p)
		sc.watch(p, time.Second)
	}
	// The producer loads every period, rate × period records spread over
	// the contracts; a load that takes longer delays the next.
	const period = 5 * time.Second
	prod := &producer{e: e, db: db, opts: ds.opts, chunk: c.soakRate.v * int(period/time.Second), rng: rand.New(rand.NewPCG(e.cfg.seed, 7))}
	pctx, stopProducer := context.WithCancel(ctx)
	prodDone := make(chan struct{})
	go func() {
		defer close(prodDone)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			if err := prod.load(pctx); err != nil && pctx.Err() == nil {
				log.Printf("horizon soak: producer: %v", err)
			}
			select {
			case <-pctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	defer func() { stopProducer(); <-prodDone }()

	_ = e.resetStatements(ctx)
	var prevStmts []stmtRaw
	start := time.Now()
	var prevPriced int64
	var prevMetrics scrape
	prevAt := start
	window := time.NewTicker(c.soakWindow)
	defer window.Stop()
	for time.Since(start) < c.soak {
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-window.C:
		}
		for _, p := range ps {
			if !p.running() {
				probe.close()
				sc.close()
				return s, fmt.Errorf("worker %s exited during the soak: %v; last log lines:\n%s", p.id, p.err, tail(p.logPath, 8))
			}
		}
		now := time.Now()
		priced, backlog, err := pricingProgress(ctx, db)
		if err != nil {
			return s, err
		}
		m := sc.total()
		hb, cm := m.Heartbeat.sub(prevMetrics.Heartbeat), m.Commit.sub(prevMetrics.Commit)
		round, _ := probe.take()
		rd := summarize(round)
		ts, err := readTableStats(ctx, db)
		if err != nil {
			return s, err
		}
		tasks, workers := findTable(ts, "tasks"), findTable(ts, "workers")
		w := soakWindow{AtS: now.Sub(start).Seconds(), Priced: priced - prevPriced, Backlog: backlog,
			PerSec:       float64(priced-prevPriced) / now.Sub(prevAt).Seconds(),
			HeartbeatP99: hb.quantileMs(0.99), CommitP99: cm.quantileMs(0.99), ClaimReadP99: rd.P99, ClaimReadP50: rd.P50,
			TasksDead: tasks.Dead, TasksHot: tasks.hotShare(), TasksBytes: tasks.HeapBytes + tasks.IndexBytes,
			WorkersDead: workers.Dead, WorkersBytes: workers.HeapBytes + workers.IndexBytes}
		if st, err := e.rawStatements(ctx, name, 60); err == nil {
			w.Statements = topStatementsSince(st, prevStmts, 8)
			prevStmts = st
		}
		s.Windows = append(s.Windows, w)
		log.Printf("horizon soak: %4.0fs: %.0f records/s, backlog %d, heartbeat p99 %.1f ms, claim reads p99 %.1f ms, tasks %d dead (%s HOT, %s), workers %d dead",
			w.AtS, w.PerSec, w.Backlog, w.HeartbeatP99, w.ClaimReadP99, w.TasksDead, pct(w.TasksHot), mib(w.TasksBytes), w.WorkersDead)
		prevPriced, prevMetrics, prevAt = priced, m, now
	}
	s.Seconds = time.Since(start).Seconds()
	stopProducer()
	<-prodDone
	probe.close()
	s.Produced = prod.Records
	s.Drained = e.drain(ctx, db, 3*time.Minute)
	s.PinHeld = held()
	for _, p := range ps {
		_ = p.signal(syscall.SIGTERM)
	}
	if err := waitAll(ps, time.Minute); err != nil {
		log.Printf("horizon soak: stopping workers: %v", err)
	}
	sc.close()
	sum, err := verifyPricing(ctx, db)
	if err != nil {
		return s, err
	}
	s.Verified = s.Drained && len(sum.Mismatches) == 0 && sum.Priced == sum.Records
	log.Printf("horizon soak: %d records produced, drained=%v, verified=%v, snapshot held to the end=%v", s.Produced, s.Drained, s.Verified, s.PinHeld)
	if !s.Verified {
		return s, fmt.Errorf("output failed verification: drained=%v, %d mismatching contracts, %d of %d priced",
			s.Drained, len(sum.Mismatches), sum.Priced, sum.Records)
	}
	return s, nil
}

func soakSection(w writer, s *soakResult) {
	if s == nil || len(s.Windows) == 0 {
		return
	}
	w("### Soak with the horizon pinned\n\n")
	w("%d workers (`--batch-size %d`, lock mode) pricing what a producer loads every 5 s (%d records/s asked, over %d contracts; %d loaded in all) for %.0f s, with one REPEATABLE READ snapshot held from before the first load to the end (held to the end: %s). Drained and verified afterwards: %s. Per window:\n\n",
		s.Workers, s.Batch, s.Rate, s.Contracts, s.Produced, s.Seconds, yesNo(s.PinHeld), yesNo(s.Verified))
	w("| at | records/s | backlog | heartbeat p99 | batch commit p99 | claim reads p50 / p99 | tasks dead versions | tasks HOT share | tasks size | workers dead versions | workers size |\n")
	w("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, x := range s.Windows {
		w("| %.0f s | %s | %d | %s | %s | %s / %s | %d | %s | %s | %d | %s |\n",
			x.AtS, rate(x.PerSec), x.Backlog, ms1(x.HeartbeatP99), ms1(x.CommitP99), ms1(x.ClaimReadP50), ms1(x.ClaimReadP99),
			x.TasksDead, pct(x.TasksHot), mib(x.TasksBytes), x.WorkersDead, mib(x.WorkersBytes))
	}
	w("\n")
	for _, x := range s.Windows {
		if len(x.Statements) == 0 {
			continue
		}
		w("<details><summary>statements in the window to %.0f s (pg_stat_statements, buffers hit or read per call)</summary>\n\n| statement | calls | total ms | mean ms | buffers per call |\n|---|---|---|---|---|\n", x.AtS)
		for _, st := range x.Statements {
			w("| `%s` | %d | %.0f | %.3f | %.1f |\n", strings.ReplaceAll(st.Query, "|", "\\|"), st.Calls, st.TotalMs, st.TotalMs/float64(max(st.Calls, 1)), st.BlocksPerCall())
		}
		w("\n</details>\n\n")
	}
}

// topStatementsSince is the n statements of cur that took the most time
// since prev (the same statements read earlier; matched by their text).
func topStatementsSince(cur, prev []stmtRaw, n int) []stmtRaw {
	before := make(map[string]stmtRaw, len(prev))
	for _, p := range prev {
		before[p.Query] = p
	}
	out := make([]stmtRaw, 0, len(cur))
	for _, c := range cur {
		p := before[c.Query]
		d := stmtRaw{Query: c.Query, Calls: c.Calls - p.Calls, TotalMs: c.TotalMs - p.TotalMs, Rows: c.Rows - p.Rows, Blocks: c.Blocks - p.Blocks}
		if d.Calls > 0 {
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TotalMs > out[j].TotalMs })
	return out[:min(n, len(out))]
}
