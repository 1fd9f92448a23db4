package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/partition"
)

// The latency scenario: a processor bound by the latency of a call to
// another service rather than by CPU. Every batch waits a fixed time
// (-latency-wait, 5 ms) before writing one output row, so a worker's
// throughput is its batches in flight (one per held partition, at most
// MaxPartitions) over that wait, whatever its CPU. One partition holds 90 %
// of the items; without segments it is processed one batch at a time by
// whoever holds it, and more workers cannot help. The processor is a
// Splitter, so its backlog is split into segments (Config.SegmentRecords,
// default 100,000) that every worker processes at once.
//
// The same data is processed, in fresh copies of one template, by 1, 2, 4
// and 8 distributors in this process (each distributor.New with its own
// name and connection pool) at default flags except the batch size, once
// with segments and once with splitting effectively off (SegmentRecords
// larger than any partition), alternating. The goal: with segments, 4
// workers process at least 3× the items/s of 1. Every run is checked
// exactly once: the output rows of every partition tile its items 1 …
// available without a gap or an overlap.

// latencyKind is the kind of the stand-in processor's partitions.
const latencyKind = "latency"

// latencyGoal is the speed-up from 1 to 4 workers the scenario checks
// (with segments).
const latencyGoal = 3.0

// latencyConfig holds the scenario's knobs.
type latencyConfig struct {
	hot, small, smallItems, batch, timeout, maxParts intFlag
	workers                                          intList
	wait                                             time.Duration
}

func (c *latencyConfig) flags(fs *flag.FlagSet) {
	c.hot.v, c.small.v, c.smallItems.v, c.batch.v = 5_400_000, 100, 6_000, 1000
	c.workers = intList{1, 2, 4, 8}
	c.timeout.v = 300
	c.maxParts.v = 1
	c.wait = 5 * time.Millisecond
	fs.Var(&c.hot, "latency-hot", "latency: items of the hot partition (default 5400000, 90 % of the items; -quick 540000)")
	fs.Var(&c.small, "latency-small", "latency: small partitions (default 100)")
	fs.Var(&c.smallItems, "latency-small-items", "latency: items of every small partition (default 6000; -quick 600)")
	fs.Var(&c.batch, "latency-batch-size", "latency: the workers' BatchSize (default 1000: batches of a fixed size, 100 per segment of the default 100,000 items)")
	fs.Var(&c.maxParts, "latency-max-partitions", "latency: each worker's MaxPartitions (default 1: one batch, one call to the service, in flight per worker, so that workers bring the concurrency; with 8, one worker already runs eight segments at once and the machine's CPU is the limit)")
	fs.Var(&c.workers, "latency-workers", "latency: worker counts (distributors in this process)")
	fs.Var(&c.timeout, "latency-timeout", "latency: seconds a run may take before it counts as failed (default 300)")
	fs.DurationVar(&c.wait, "latency-wait", c.wait, "latency: the stand-in processor's wait per batch (a call to another service)")
}

func (c *latencyConfig) applyQuick() {
	if !c.hot.set {
		c.hot.v = 540_000
	}
	if !c.smallItems.set {
		c.smallItems.v = 600
	}
}

// latencyRun is one timed processing of the data set.
type latencyRun struct {
	Workers  int     `json:"workers"`
	Segments bool    `json:"segments"` // splitting on (default SegmentRecords) or off
	Seconds  float64 `json:"seconds"`
	PerSec   float64 `json:"per_sec"` // items/s
	Batches  int64   `json:"batches"` // output rows: committed batches
	// SegmentRows are the segment task rows made; Splits the splits.
	SegmentRows int64  `json:"segment_rows"`
	Splits      int64  `json:"splits"`
	CPU         cpuUse `json:"cpu"`
	// Verified: every partition's output rows tile its items 1 …
	// available exactly once, and partition_progress has nothing pending.
	Verified bool   `json:"verified"`
	Problem  string `json:"problem,omitempty"` // what the check found
	Error    string `json:"error,omitempty"`
}

// latencyResult is the latency scenario's measurements.
type latencyResult struct {
	Hot            int64        `json:"hot_items"`
	Small          int          `json:"small_partitions"`
	SmallItems     int64        `json:"small_items"`
	Items          int64        `json:"items"`
	BatchSize      int          `json:"batch_size"`
	WaitMs         float64      `json:"wait_ms"`
	SegmentRecords int64        `json:"segment_records"`
	MaxPartitions  int          `json:"max_partitions"`
	Runs           []latencyRun `json:"runs"`
	Error          string       `json:"error,omitempty"`
}

// run returns the run of n workers with or without segments.
func (r *latencyResult) run(n int, segments bool) (latencyRun, bool) {
	for _, x := range r.Runs {
		if x.Workers == n && x.Segments == segments && x.Error == "" && x.PerSec > 0 {
			return x, true
		}
	}
	return latencyRun{}, false
}

// speedup is the items/s of n workers over those of 1, with or without
// segments.
func (r *latencyResult) speedup(n int, segments bool) (float64, bool) {
	one, ok1 := r.run(1, segments)
	x, ok := r.run(n, segments)
	if !ok1 || !ok {
		return 0, false
	}
	return x.PerSec / one.PerSec, true
}

func (e *env) runLatency(ctx context.Context, res *results) error {
	c := e.cfg.latency
	r := &latencyResult{Hot: int64(c.hot.v), Small: c.small.v, SmallItems: int64(c.smallItems.v), BatchSize: c.batch.v,
		WaitMs: float64(c.wait) / float64(time.Millisecond), SegmentRecords: distributor.SegmentRecordsDefault,
		MaxPartitions: c.maxParts.v}
	r.Items = r.Hot + int64(r.Small)*r.SmallItems
	res.Latency = r
	tpl, err := e.template(ctx, "latency_"+fmt.Sprint(r.Hot)+"_"+fmt.Sprint(r.Small)+"_"+fmt.Sprint(r.SmallItems), func(ctx context.Context, db *bun.DB) error {
		return latencyFill(ctx, db, r)
	})
	if err != nil {
		r.Error = err.Error()
		return err
	}
	var failed error
	for _, n := range c.workers {
		for _, seg := range []bool{true, false} {
			run, err := e.latencyRun(ctx, tpl, r, n, seg)
			if err != nil {
				run.Error = err.Error()
				failed = err
				if ctx.Err() != nil {
					r.Runs = append(r.Runs, run)
					return err
				}
			}
			r.Runs = append(r.Runs, run)
			log.Printf("latency: %d worker(s), segments %v: %s items in %.1f s, %.0f items/s, %d batches, %d segments; exactly once: %v %s",
				n, seg, count(r.Items), run.Seconds, run.PerSec, run.Batches, run.SegmentRows, run.Verified, run.Problem)
		}
	}
	res.addCommand("latency: in-process distributors, a stand-in Splitter processor waiting " + c.wait.String() + " per batch")
	if failed != nil {
		return failed
	}
	for _, run := range r.Runs {
		if !run.Verified {
			return fmt.Errorf("%d worker(s), segments %v: not exactly once: %s", run.Workers, run.Segments, run.Problem)
		}
	}
	return nil
}

// latencyFill makes the scenario's partitions and its output table.
func latencyFill(ctx context.Context, db *bun.DB, r *latencyResult) error {
	if _, err := db.ExecContext(ctx, `CREATE TABLE latency_out (
		partition_key text COLLATE "C" NOT NULL,
		first_item bigint NOT NULL,
		last_item bigint NOT NULL,
		PRIMARY KEY (partition_key, first_item))`); err != nil {
		return err
	}
	work := []partition.Work{{Key: "hot", N: r.Hot}}
	for i := range r.Small {
		work = append(work, partition.Work{Key: fmt.Sprintf("small-%03d", i), N: r.SmallItems})
	}
	h, err := dbconn.Wrap(ctx, db, dbconn.Access{})
	if err != nil {
		return err
	}
	_, err = partition.NewStore(h, "").Kind(latencyKind).AddWorks(ctx, work)
	return err
}

// latencyRun processes a fresh copy of the template with n distributors,
// with segments (SegmentRecords at its default) or without (larger than
// any partition), and checks the output.
func (e *env) latencyRun(ctx context.Context, tpl string, r *latencyResult, n int, segments bool) (latencyRun, error) {
	run := latencyRun{Workers: n, Segments: segments}
	name, db, err := e.fresh(ctx, tpl, "latency")
	if err != nil {
		return run, err
	}
	defer func() { db.Close(); e.dropDB(ctx, name) }()
	seg := int64(0) // the default
	if !segments {
		seg = r.Hot + r.SmallItems + 1
	}
	proc := &latencyProc{wait: e.cfg.latency.wait}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var ds []*distributor.Distributor
	var dbs []*dbconn.DB
	defer func() {
		for _, d := range dbs {
			d.Close()
		}
	}()
	for i := range n {
		wdb, err := openMode(ctx, e.url(name), -1, r.MaxPartitions+4)
		if err != nil {
			return run, err
		}
		dbs = append(dbs, wdb)
		d, err := distributor.New(wdb, proc, distributor.Config{Name: fmt.Sprintf("latency-%d", i+1),
			BatchSize: r.BatchSize, SegmentRecords: seg, MaxPartitions: r.MaxPartitions, UntilDone: true, Logger: quiet,
			OnEvent: func(ev distributor.Event) {
				if ev.Kind == distributor.EventSplit {
					proc.splits.Add(1)
				}
			}})
		if err != nil {
			return run, err
		}
		ds = append(ds, d)
	}
	e.checkpoint(ctx)
	m := startCPU(e.cpu)
	start := time.Now()
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, d := range ds {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = d.Run(rctx) }()
	}
	// Until done: every distributor returns once nothing is pending and
	// it holds nothing.
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	err = nil
	select {
	case <-finished:
	case <-time.After(time.Duration(e.cfg.latency.timeout.v) * time.Second):
		err = fmt.Errorf("not done after %d s", e.cfg.latency.timeout.v)
	}
	run.Seconds = time.Since(start).Seconds()
	run.CPU = m.stop()
	for _, d := range ds {
		d.Stop()
	}
	wg.Wait()
	if err != nil {
		return run, err
	}
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return run, err
		}
	}
	if err := proc.failure(); err != nil {
		return run, err
	}
	run.PerSec = float64(r.Items) / run.Seconds
	run.Splits = proc.splits.Load()
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM latency_out`).Scan(&run.Batches); err != nil {
		return run, err
	}
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM baton.tasks WHERE kind = ? AND segment_of IS NOT NULL`,
		latencyKind).Scan(&run.SegmentRows); err != nil {
		return run, err
	}
	run.Problem, err = latencyCheck(ctx, db, r.Items)
	if err != nil {
		return run, err
	}
	run.Verified = run.Problem == ""
	return run, nil
}

// latencyCheck returns what is wrong with the output, "" when every item
// of every partition was processed exactly once: each partition's output
// rows tile 1 … available without a gap or an overlap, they add up to
// the items produced, and partition_progress has nothing pending.
func latencyCheck(ctx context.Context, db *bun.DB, items int64) (string, error) {
	var broken, wrongEnd, pending, partitions, total int64
	err := db.QueryRowContext(ctx, `
		WITH o AS (
			SELECT partition_key, first_item, last_item,
			       lag(last_item) OVER (PARTITION BY partition_key ORDER BY first_item) AS prev
			  FROM latency_out)
		SELECT (SELECT count(*) FROM o WHERE first_item <> coalesce(prev, 0) + 1 OR last_item < first_item),
		       (SELECT count(*) FROM baton.partition_progress p
		         WHERE p.kind = ? AND p.available <> coalesce((SELECT max(last_item) FROM latency_out o WHERE o.partition_key = p.partition_key), 0)),
		       (SELECT coalesce(sum(pending), 0) FROM baton.partition_progress WHERE kind = ?),
		       (SELECT count(*) FROM baton.partition_progress WHERE kind = ?),
		       (SELECT coalesce(sum(last_item - first_item + 1), 0) FROM latency_out)`,
		latencyKind, latencyKind, latencyKind).Scan(&broken, &wrongEnd, &pending, &partitions, &total)
	if err != nil {
		return "", fmt.Errorf("checking the output: %w", err)
	}
	var orphan int64
	if err := db.QueryRowContext(ctx, `SELECT count(DISTINCT partition_key) FROM latency_out o
		WHERE NOT EXISTS (SELECT 1 FROM baton.partition_progress p WHERE p.kind = ? AND p.partition_key = o.partition_key)`,
		latencyKind).Scan(&orphan); err != nil {
		return "", fmt.Errorf("checking the output: %w", err)
	}
	switch {
	case broken > 0:
		return fmt.Sprintf("%d output rows leave a gap or overlap the previous one", broken), nil
	case wrongEnd > 0:
		return fmt.Sprintf("%d of %d partitions' output does not end at their available", wrongEnd, partitions), nil
	case orphan > 0:
		return fmt.Sprintf("output for %d partitions that do not exist", orphan), nil
	case pending != 0:
		return fmt.Sprintf("%d items still pending", pending), nil
	case total != items:
		return fmt.Sprintf("%d items processed of %d", total, items), nil
	}
	return "", nil
}

// latencyProc is the stand-in processor: per batch it waits, as a call to
// another service would, then writes one row naming the items it
// processed. It has no per-item state, so a partition splits anywhere:
// every size items. Its checkpoint state is the position, which it checks
// against the checkpoint's, so a segment started from the wrong state is
// caught.
type latencyProc struct {
	wait   time.Duration
	splits atomic.Int64
	mu     sync.Mutex
	err    error // the first continuity error
}

var _ interface {
	distributor.Splitter
	distributor.Kinded
} = (*latencyProc)(nil)

// latencyState is the stand-in's checkpoint state.
type latencyState struct {
	At int64 `json:"at"`
}

func latencyStateAt(at int64) json.RawMessage {
	b, _ := json.Marshal(latencyState{At: at})
	return b
}

func (p *latencyProc) Kind() string { return latencyKind }

func (p *latencyProc) Process(ctx context.Context, b *distributor.Batch) (distributor.Result, error) {
	cp := b.Checkpoint
	var st latencyState
	if len(cp.State) > 0 {
		if err := json.Unmarshal(cp.State, &st); err != nil {
			return distributor.Result{}, fmt.Errorf("reading the state of %s: %w", b.Lease, err)
		}
	}
	if st.At != cp.Position {
		err := fmt.Errorf("%s: checkpoint at %d carries the state of %d", b.Lease, cp.Position, st.At)
		p.mu.Lock()
		p.err = cmp.Or(p.err, err)
		p.mu.Unlock()
		return distributor.Result{}, err
	}
	n := min(int64(b.Limit), cp.Available-cp.Position)
	if n <= 0 {
		return distributor.Result{Position: cp.Available, State: latencyStateAt(cp.Available)}, nil
	}
	t := time.NewTimer(p.wait)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
		return distributor.Result{}, ctx.Err()
	}
	end := cp.Position + n
	if _, err := b.Tx.ExecContext(ctx, `INSERT INTO latency_out (partition_key, first_item, last_item) VALUES (?, ?, ?)`,
		b.Partition, cp.Position+1, end); err != nil {
		return distributor.Result{}, err
	}
	return distributor.Result{Position: end, State: latencyStateAt(end)}, nil
}

// Split splits the pending items every size items.
func (p *latencyProc) Split(_ context.Context, b *distributor.Batch, size int64) (distributor.Split, error) {
	return latencySplit(b.Checkpoint.Position, b.Checkpoint.Available, size), nil
}

// latencySplit is the split of the items (from, to] every size items.
func latencySplit(from, to, size int64) distributor.Split {
	var s distributor.Split
	for at := from + size; at < to; at += size {
		s.Points = append(s.Points, distributor.SplitPoint{Position: at, State: latencyStateAt(at)})
	}
	s.End = latencyStateAt(to)
	return s
}

func (p *latencyProc) failure() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}
