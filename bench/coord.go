package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"github.com/batonhq/baton/internal/leaseinfo"
	"log"
	mrand "math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
)

// Scenario 3: what coordination costs the database. Simulated workers are
// goroutines, each with its own worker identity, running the real
// taskstore.Store statements on the distributor's schedule: the batched
// heartbeat every interval, the claim poll (Candidates, then Claim) when
// below the fair share, and the fair-share read (FairShareLoad) every fifth
// interval. They process nothing: this is the cost of coordination alone.

// coordCell is one measurement: W simulated workers over P partitions,
// idle (no pending work anywhere) or busy (every partition pending, each
// worker holding its fair share).
type coordCell struct {
	Workers    int    `json:"workers"`
	Partitions int    `json:"partitions"`
	State      string `json:"state"`
	Held       int    `json:"held"`
	// SettledS is how long, from the workers' start, busy workers took to
	// claim their shares; 0 if they had not by the window.
	SettledS    float64            `json:"settled_s,omitempty"`
	Seconds     float64            `json:"seconds"`
	Statements  []stmtKind         `json:"statements,omitempty"`
	StmtPerSec  float64            `json:"statements_per_s"`
	PerWorker   float64            `json:"statements_per_worker_interval"`
	HBPerWorker float64            `json:"heartbeats_per_worker_interval"`
	Client      map[string]int64   `json:"client_calls"`
	Latency     map[string]dist    `json:"latency"`
	CPU         cpuUse             `json:"cpu"`
	DBCores     float64            `json:"db_cores"`
	ServerMean  map[string]float64 `json:"server_mean_ms,omitempty"`
}

// heldLatency is the heartbeat of one worker holding N partitions.
type heldLatency struct {
	Held       int     `json:"held"`
	Beats      int     `json:"beats"`
	Statements int64   `json:"heartbeat_statements"` // pg_stat_statements calls during the beats
	Latency    dist    `json:"latency"`
	ServerMean float64 `json:"server_mean_ms"`
}

// claimCell is the claim loop's capacity: K goroutines claiming and
// releasing as fast as they can.
type claimCell struct {
	Claimers   int        `json:"claimers"`
	Batch      int        `json:"batch"`
	Partitions int        `json:"partitions"`
	Seconds    float64    `json:"seconds"`
	Claims     int64      `json:"claims"`
	PerSec     float64    `json:"claims_per_s"`
	LostCAS    int64      `json:"lost_cas"`
	Scan       dist       `json:"scan_latency"`
	Claim      dist       `json:"claim_latency"`
	Release    dist       `json:"release_latency"`
	CPU        cpuUse     `json:"cpu"`
	Statements []stmtKind `json:"statements,omitempty"`
}

type coordResult struct {
	IntervalS   float64       `json:"interval_s"`
	StaleAfterS float64       `json:"stale_after_s"`
	Conns       int           `json:"connections"`
	WindowS     float64       `json:"window_s"`
	SettleS     float64       `json:"settle_s,omitempty"`
	Cells       []coordCell   `json:"cells"`
	Held        []heldLatency `json:"held"`
	Claims      []claimCell   `json:"claims"`
	Tiny        *runResult    `json:"tiny,omitempty"`
	Commits     *commitRate   `json:"pgbench,omitempty"`
	TinySet     *dataset      `json:"tiny_dataset,omitempty"`
}

func (e *env) runCoordination(ctx context.Context, res *results) error {
	cfg := e.cfg
	c := &coordResult{IntervalS: cfg.coordInterval.Seconds(), StaleAfterS: 10 * cfg.coordInterval.Seconds(), Conns: cfg.coordConns,
		WindowS: cfg.coordDuration.Seconds(), SettleS: cfg.coordSettle.Seconds()}
	res.Coord = c
	tpl, err := e.template(ctx, "empty", nil)
	if err != nil {
		return err
	}
	for _, parts := range cfg.coordParts {
		if cfg.coordTinyOnly {
			break
		}
		name, db, err := e.fresh(ctx, tpl, "coord")
		if err != nil {
			return err
		}
		err = e.coordPartitions(ctx, c, name, db, parts)
		db.Close()
		e.dropDB(ctx, name)
		if err != nil {
			return err
		}
	}
	if cfg.coordCellsOnly {
		return nil
	}
	ds, err := e.seedTemplate(ctx, "tiny", cfg.tinyContracts, 1)
	if err != nil {
		return err
	}
	c.TinySet = ds
	r, err := e.runDesign(ctx, ds, designBaton, 2, 1, res)
	if err != nil {
		return fmt.Errorf("one-record contracts: %w", err)
	}
	c.Tiny = &r
	// The server's single-row commit rate from as many clients as there
	// were workers, right after: the physical limit the contracts are
	// compared with.
	cr, err := e.pgbenchCommits(ctx, 2, 10*time.Second)
	if err != nil {
		return fmt.Errorf("pgbench single-row commits: %w", err)
	}
	c.Commits = cr
	return nil
}

// coordPartitions runs every measurement over one partition count.
func (e *env) coordPartitions(ctx context.Context, c *coordResult, name string, db *bun.DB, parts int) error {
	cfg := e.cfg
	if _, err := db.ExecContext(ctx, `
		INSERT INTO baton.tasks (partition_key, available, position)
		SELECT 'p-' || lpad(i::text, 7, '0'), 0, 0 FROM generate_series(1, ?) i`, parts); err != nil {
		return fmt.Errorf("creating %d partitions: %w", parts, err)
	}
	simDB, err := dbconn.Open(e.url(name), dbconn.Options{MaxOpenConns: cfg.coordConns, ApplicationName: "bench-sim"})
	if err != nil {
		return err
	}
	defer simDB.Close()
	for _, w := range cfg.coordWorkers {
		for _, state := range []string{"idle", "busy"} {
			if err := resetTasks(ctx, db, state == "busy"); err != nil {
				return err
			}
			cell, err := e.coordCell(ctx, name, simDB, w, parts, state)
			if err != nil {
				return err
			}
			log.Printf("coordination: %d workers, %d partitions, %s: %.0f statements/s (%.2f per worker per interval), db %.2f cores",
				w, parts, state, cell.StmtPerSec, cell.PerWorker, cell.DBCores)
			c.Cells = append(c.Cells, cell)
		}
	}
	if cfg.coordCellsOnly {
		return nil
	}
	if parts == slices.Max(cfg.coordParts) {
		if err := resetTasks(ctx, db, true); err != nil {
			return err
		}
		if c.Held, err = e.heldSeries(ctx, name, simDB); err != nil {
			return err
		}
	}
	for _, batch := range cfg.claimBatches {
		for _, k := range cfg.claimers {
			if err := resetTasks(ctx, db, true); err != nil {
				return err
			}
			cl, err := e.claimLoop(ctx, name, simDB, k, parts, batch)
			if err != nil {
				return err
			}
			log.Printf("coordination: claim loop, %d claimers, %d a statement, %d partitions: %.0f claims/s", k, batch, parts, cl.PerSec)
			c.Claims = append(c.Claims, cl)
		}
	}
	return nil
}

// resetTasks makes every partition unowned, pending or not, and forgets
// the workers.
func resetTasks(ctx context.Context, db *bun.DB, pending bool) error {
	avail := 0
	if pending {
		avail = 1000
	}
	for _, s := range []string{
		`DELETE FROM baton.workers`,
		fmt.Sprintf(`UPDATE baton.tasks SET owner = NULL, version = version + 1, heartbeat_at = NULL,
			lease_expires_at = '-infinity', available = %d, position = 0`, avail),
		`VACUUM ANALYZE baton.tasks`,
		`VACUUM ANALYZE baton.workers`,
	} {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("resetting partitions: %w", err)
		}
	}
	return nil
}

// sim records client-side latencies while recording is on.
type sim struct {
	store     *taskstore.Store
	ttl       time.Duration
	interval  time.Duration
	recording atomic.Bool
	mu        sync.Mutex
	lat       map[string][]time.Duration
	calls     map[string]int64
	held      atomic.Int64
}

func newSim(db *dbconn.DB, interval time.Duration) *sim {
	// As the distributor's store: coordination statements prepared on
	// direct connections.
	store := taskstore.NewStore(db, "").PrepareWhen(db.Direct)
	return &sim{store: store, ttl: 10 * interval, interval: interval,
		lat: map[string][]time.Duration{}, calls: map[string]int64{}}
}

func (s *sim) timed(kind string, fn func() error) error {
	t0 := time.Now()
	err := fn()
	if s.recording.Load() {
		d := time.Since(t0)
		s.mu.Lock()
		s.lat[kind] = append(s.lat[kind], d)
		s.calls[kind]++
		s.mu.Unlock()
	}
	return err
}

func instanceSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// worker runs one simulated worker's coordination loop.
func (s *sim) worker(ctx context.Context, i int, phase time.Duration) {
	w := taskstore.Worker{InstanceID: fmt.Sprintf("sim-%d%s%s", i, partition.InstanceSeparator, instanceSuffix()),
		Name: fmt.Sprintf("sim-%d", i), Hostname: "bench", PID: os.Getpid(), Mode: string(distributor.ModeLock)}
	select {
	case <-ctx.Done():
		return
	case <-time.After(phase):
	}
	var held []partition.Lease
	share := 1
	tick := time.NewTicker(s.interval)
	defer tick.Stop()
	for n := 0; ; n++ {
		var renewed []leaseinfo.Renewal
		err := s.timed("heartbeat", func() (err error) {
			// As the distributor with its default timings: leases with
			// more than ttl − 2 intervals left are checked, not rewritten.
			renewed, err = s.store.HeartbeatBelow(ctx, w, s.ttl, s.ttl-2*s.interval, held)
			return err
		})
		if err == nil {
			s.held.Add(int64(len(renewed) - len(held)))
			held = held[:0]
			for _, r := range renewed {
				held = append(held, r.Lease)
			}
		}
		if n%5 == 0 {
			var load taskstore.Load
			if s.timed("cluster load", func() (err error) { load, err = s.store.FairShareLoad(ctx, w.InstanceID, 8, s.ttl); return err }) == nil {
				share = distributor.MaxPartitionsDefault
				if load.LiveWorkers > 1 {
					share = min(share, max(1, (load.Busy+load.LiveWorkers-1)/load.LiveWorkers))
				}
			}
		}
		if want := min(share, distributor.MaxPartitionsDefault) - len(held); want > 0 {
			var cands []taskstore.Candidate
			if s.timed("claim scan", func() (err error) { cands, err = s.store.Candidates(ctx, 4*want+8); return err }) == nil {
				mrand.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
				for round := 0; round < 2 && want > 0 && len(cands) > 0; round++ {
					try := cands[:min(want, len(cands))]
					cands = cands[len(try):]
					var won []taskstore.Claimed
					if s.timed("claim", func() (err error) { won, err = s.store.Claim(ctx, w.InstanceID, s.ttl, try); return err }) != nil {
						break
					}
					for _, c := range won {
						held = append(held, c.Lease)
					}
					s.held.Add(int64(len(won)))
					want -= len(won)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// coordCell runs W simulated workers, lets them settle, and measures a
// window.
func (e *env) coordCell(ctx context.Context, dbname string, simDB *dbconn.DB, workers, parts int, state string) (coordCell, error) {
	cfg := e.cfg
	cell := coordCell{Workers: workers, Partitions: parts, State: state}
	s := newSim(simDB, cfg.coordInterval)
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		phase := time.Duration(mrand.Int64N(int64(cfg.coordInterval)))
		go func() {
			defer wg.Done()
			s.worker(wctx, i, phase)
		}()
	}
	defer func() { cancel(); wg.Wait() }()
	// Settle: everyone registered and, when busy, holding its share.
	want := 0
	if state == "busy" {
		want = min(parts, workers*distributor.MaxPartitionsDefault)
	}
	started := time.Now()
	settle := started.Add(cfg.coordSettle)
	time.Sleep(2 * cfg.coordInterval)
	for int(s.held.Load()) < want && time.Now().Before(settle) {
		time.Sleep(cfg.coordInterval / 4)
	}
	if want > 0 && int(s.held.Load()) >= want {
		cell.SettledS = time.Since(started).Seconds()
	}
	// Let the claims' fair-share reads catch up before measuring.
	time.Sleep(cfg.coordInterval)
	_ = e.resetStatements(ctx)
	m := startCPU(e.cpu)
	s.recording.Store(true)
	time.Sleep(cfg.coordDuration)
	s.recording.Store(false)
	cell.CPU = m.stop()
	cell.Seconds = cell.CPU.Wall
	cell.Held = int(s.held.Load())
	cell.Client = s.calls
	cell.Latency = map[string]dist{}
	var clientTotal int64
	for k, v := range s.lat {
		cell.Latency[k] = summarize(v)
		clientTotal += s.calls[k]
	}
	intervals := float64(workers) * cell.Seconds / cfg.coordInterval.Seconds()
	if st, err := e.statements(ctx, dbname); err == nil {
		cell.Statements = st
		cell.ServerMean = map[string]float64{}
		for _, k := range st {
			cell.ServerMean[k.Kind] = k.MeanMs()
		}
		cell.StmtPerSec = float64(totalCalls(st)) / cell.Seconds
		cell.PerWorker = float64(totalCalls(st)) / intervals
		cell.HBPerWorker = float64(findKind(st, "heartbeat").Calls) / intervals
	} else {
		cell.StmtPerSec = float64(clientTotal) / cell.Seconds
		cell.PerWorker = float64(clientTotal) / intervals
		cell.HBPerWorker = float64(s.calls["heartbeat"]) / intervals
	}
	if cell.CPU.DB >= 0 {
		cell.DBCores = cell.CPU.DB / cell.Seconds
	}
	return cell, nil
}

// heldSeries times the heartbeat of one worker holding 1 … 1000
// partitions, and counts its statements.
func (e *env) heldSeries(ctx context.Context, dbname string, simDB *dbconn.DB) ([]heldLatency, error) {
	store := taskstore.NewStore(simDB, "")
	var out []heldLatency
	for _, n := range e.cfg.coordHeld {
		w := taskstore.Worker{InstanceID: fmt.Sprintf("held-%d#%s", n, instanceSuffix()), Name: fmt.Sprintf("held-%d", n), Mode: "lock"}
		ttl := 10 * e.cfg.coordInterval
		var leases []partition.Lease
		for len(leases) < n {
			cands, err := store.Candidates(ctx, min(1000, n-len(leases)))
			if err != nil {
				return nil, err
			}
			if len(cands) == 0 {
				return nil, fmt.Errorf("only %d partitions claimable, %d wanted", len(leases), n)
			}
			won, err := store.Claim(ctx, w.InstanceID, ttl, cands)
			if err != nil {
				return nil, err
			}
			for _, c := range won {
				leases = append(leases, c.Lease)
			}
		}
		_ = e.resetStatements(ctx)
		h := heldLatency{Held: n, Beats: e.cfg.heartbeatSample}
		var lat []time.Duration
		for range h.Beats {
			t0 := time.Now()
			renewed, err := store.HeartbeatBelow(ctx, w, ttl, ttl+time.Hour, leases)
			if err != nil {
				return nil, err
			}
			if len(renewed) != n {
				return nil, fmt.Errorf("heartbeat renewed %d of %d leases", len(renewed), n)
			}
			lat = append(lat, time.Since(t0))
			time.Sleep(5 * time.Millisecond)
		}
		h.Latency = summarize(lat)
		if st, err := e.statements(ctx, dbname); err == nil {
			hb := findKind(st, "heartbeat")
			h.Statements, h.ServerMean = hb.Calls, hb.MeanMs()
		}
		log.Printf("coordination: heartbeat holding %d partitions: p50 %.2fms, %d statements for %d beats",
			n, h.Latency.P50, h.Statements, h.Beats)
		out = append(out, h)
		if _, err := store.Release(ctx, w.InstanceID, leases); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// claimLoop measures claims per second: k goroutines each claim batch
// partitions the way the distributor does when it has room for that many
// (Candidates of 4×batch+8, shuffle, one Claim compare-and-set, a second
// one for those lost) and release them at once in one statement, as fast
// as they can.
func (e *env) claimLoop(ctx context.Context, dbname string, simDB *dbconn.DB, k, parts, batch int) (claimCell, error) {
	cl := claimCell{Claimers: k, Partitions: parts, Batch: batch}
	store := taskstore.NewStore(simDB, "")
	ttl := 10 * e.cfg.coordInterval
	var claims, lost atomic.Int64
	var mu sync.Mutex
	var scan, claim, rel []time.Duration
	_ = e.resetStatements(ctx)
	m := startCPU(e.cpu)
	wctx, cancel := context.WithTimeout(ctx, e.cfg.claimDuration)
	defer cancel()
	var wg sync.WaitGroup
	var firstErr error
	fail := func(err error) {
		if wctx.Err() == nil {
			mu.Lock()
			firstErr = cmp.Or(firstErr, err)
			mu.Unlock()
		}
	}
	for i := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("claimer-%d#%s", i, instanceSuffix())
			var ls, lc, lr []time.Duration
			defer func() {
				mu.Lock()
				scan, claim, rel = append(scan, ls...), append(claim, lc...), append(rel, lr...)
				mu.Unlock()
			}()
			for wctx.Err() == nil {
				t0 := time.Now()
				cands, err := store.Candidates(wctx, 4*batch+8)
				if err != nil {
					fail(err)
					break
				}
				ls = append(ls, time.Since(t0))
				mrand.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
				var leases []partition.Lease
				want := batch
				for round := 0; round < 2 && want > 0 && len(cands) > 0; round++ {
					try := cands[:min(want, len(cands))]
					cands = cands[len(try):]
					t1 := time.Now()
					won, err := store.Claim(wctx, owner, ttl, try)
					if err != nil {
						fail(err)
						break
					}
					lc = append(lc, time.Since(t1))
					lost.Add(int64(len(try) - len(won)))
					for _, w := range won {
						leases = append(leases, w.Lease)
					}
					want -= len(won)
				}
				if len(leases) == 0 {
					continue
				}
				claims.Add(int64(len(leases)))
				t2 := time.Now()
				if _, err := store.Release(wctx, owner, leases); err != nil {
					fail(err)
					break
				}
				lr = append(lr, time.Since(t2))
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return cl, fmt.Errorf("claim loop: %w", firstErr)
	}
	cl.CPU = m.stop()
	cl.Seconds = cl.CPU.Wall
	cl.Claims, cl.LostCAS = claims.Load(), lost.Load()
	cl.PerSec = float64(cl.Claims) / cl.Seconds
	cl.Scan, cl.Claim, cl.Release = summarize(scan), summarize(claim), summarize(rel)
	if st, err := e.statements(ctx, dbname); err == nil {
		cl.Statements = st
	}
	return cl, nil
}
