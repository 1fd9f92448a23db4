package main

import (
	"bufio"
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing/ingest"
	"github.com/batonhq/baton/pricing/seed"
)

// The segtakeover scenario: crash takeover of segments. One contract holds
// nine tenths of the records (`worker seed --shape hot:0.9`) and a producer
// keeps appending to it, so that it is split again and again into segments
// (--segment-records) that every worker prices at once. Workers run at the
// fast timing (--heartbeat 200ms --stale-after 1s --confirm 3). Again and
// again the worker holding the most segments with pending work is frozen
// for an instant (so what it holds can be read), SIGKILLed, and for every
// segment it held the time from the kill to the first batch another worker
// committed on that segment is read from the events table (its
// first_batch event, by the commit timestamp of the row, or its insertion
// time when the server does not track commit timestamps); then a
// replacement worker is started. At the end the producer stops, the
// workers drain the backlog, and duplicates, unpriced records and
// pricer.Verify are checked with priced's primary key replaced by a plain
// index, as in the failover scenario.

// segTakeConfig holds the scenario's knobs.
type segTakeConfig struct {
	kills, workers, contracts, perContract, segmentRecords, batch, chunk, lowWater intFlag
}

func (c *segTakeConfig) flags(fs *flag.FlagSet) {
	c.kills.v, c.workers.v, c.contracts.v, c.perContract.v = 12, 3, 1000, 1000
	c.segmentRecords.v, c.batch.v, c.chunk.v, c.lowWater.v = 30_000, 100, 300_000, 60_000
	fs.Var(&c.kills, "segtake-kills", "segtakeover: SIGKILLs of a worker holding segments (default 12; -quick 3)")
	fs.Var(&c.workers, "segtake-workers", "segtakeover: worker processes (default 3)")
	fs.Var(&c.contracts, "segtake-contracts", "segtakeover: contracts of the seed, one of them holding 90 % of its records (default 1000)")
	fs.Var(&c.perContract, "segtake-records-per-contract", "segtakeover: mean records per contract of the seed (default 1000: 1,000,000 records, 900,000 in the hot contract; -quick 200)")
	fs.Var(&c.segmentRecords, "segtake-segment-records", "segtakeover: the workers' --segment-records (default 30000)")
	fs.Var(&c.batch, "segtake-batch-size", "segtakeover: the workers' --batch-size (default 100, as the failover scenario)")
	fs.Var(&c.chunk, "segtake-chunk", "segtakeover: records the producer appends to the hot contract at a time (default 300000: ten segments)")
	fs.Var(&c.lowWater, "segtake-low-water", "segtakeover: the producer appends when fewer records than this are pending (default 60000)")
}

func (c *segTakeConfig) applyQuick() {
	if !c.kills.set {
		c.kills.v = 3
	}
	if !c.perContract.set {
		c.perContract.v = 200
	}
}

// segTakeKill is one SIGKILL: the segments the victim held with pending
// work, and when another worker first committed a batch on each.
type segTakeKill struct {
	Victim string `json:"victim"`
	// Segments are the victim's segments with pending work when frozen;
	// OtherHeld its other partitions with pending work (not measured).
	Segments  []string `json:"segments"`
	OtherHeld int      `json:"other_held"`
	// Pending is the partitions (segments or not) with pending work when
	// the victim was frozen, held by anyone or nobody.
	Pending int `json:"pending_partitions"`
	// EachS is, per segment in Segments' order, seconds from the kill to
	// the first batch another worker committed on it; -1: none within the
	// wait. EventMS is that first_batch event's own takeover_ms (from the
	// victim's last heartbeat, database clock); -1 when absent.
	EachS   []float64 `json:"each_s"`
	EventMS []int64   `json:"event_takeover_ms"`
	// FrozenS is how long the victim was frozen before the kill: it
	// sent no heartbeat from the freeze on, so adding it to EachS times
	// the takeover from the moment the worker stopped.
	FrozenS float64 `json:"frozen_s"`
	// By names the worker instance that took each segment over.
	By []string `json:"by"`
}

// segTakeoverResult is the scenario's measurements.
type segTakeoverResult struct {
	Timing         timing        `json:"timing"`
	Workers        int           `json:"workers"`
	Batch          int           `json:"batch_size"`
	SegmentRecords int           `json:"segment_records"`
	MaxPartitions  int           `json:"max_partitions"`
	Contracts      int           `json:"contracts"`
	PerContract    int           `json:"records_per_contract"`
	Shape          string        `json:"shape"`
	Seeded         int64         `json:"records_seeded"`
	HotContract    string        `json:"hot_contract"`
	HotSeeded      int64         `json:"hot_records_seeded"`
	Chunk          int           `json:"producer_chunk"`
	LowWater       int           `json:"producer_low_water"`
	Produced       int64         `json:"records_produced"`
	Loads          int           `json:"producer_loads"`
	Kills          []segTakeKill `json:"kills"`
	// Takeover is over every segment taken over, in ms from the kill;
	// FromFreeze the same from the freeze before it.
	Takeover   dist `json:"takeover"`
	FromFreeze dist `json:"takeover_from_freeze"`
	// EventTakeover is the first_batch events' own takeover_ms over the
	// same segments (from the victim's last heartbeat).
	EventTakeover dist `json:"event_takeover"`
	TimedOut      int  `json:"timed_out"`
	// BoundS is stale-after + poll (= heartbeat) + confirm × heartbeat;
	// the bound of docs/protocol.md adds one batch, allowed
	// BatchAllowanceS.
	BoundS          float64 `json:"bound_s"`
	BatchAllowanceS float64 `json:"batch_allowance_s"`
	// SegmentRows is how many distinct segments were ever claimed.
	SegmentRows  int64  `json:"segment_rows"`
	Duplicates   int64  `json:"duplicates"`
	Lost         int64  `json:"lost"`
	Mismatches   int    `json:"mismatches"`
	Records      int64  `json:"records"` // at the end, seeded + produced
	Priced       int64  `json:"priced"`
	Drained      bool   `json:"drained"`
	WorkerEvents events `json:"worker_events"`
	// LostCauses are the events table's lost events (leases a live
	// worker gave up or found taken), by cause, segment or not.
	LostCauses  []lostCause `json:"lost_causes,omitempty"`
	CommitTS    bool        `json:"commit_timestamps"`
	Command     string      `json:"command"`
	WallSeconds float64     `json:"wall_s"`
	Error       string      `json:"error,omitempty"`
}

// within says whether every segment was taken over and the p99 is within
// the bound plus one batch.
func (r *segTakeoverResult) within() bool {
	return r.TimedOut == 0 && r.Takeover.N > 0 && r.Takeover.P99/1000 <= r.BoundS+r.BatchAllowanceS
}

func (e *env) runSegTakeover(ctx context.Context, res *results) error {
	c := e.cfg.segtake
	tm := timingFast
	r := &segTakeoverResult{Timing: tm, Workers: c.workers.v, Batch: c.batch.v, SegmentRecords: c.segmentRecords.v,
		MaxPartitions: distributor.MaxPartitionsDefault, Contracts: c.contracts.v, PerContract: c.perContract.v,
		Chunk: c.chunk.v, LowWater: c.lowWater.v, BoundS: tm.bound().Seconds(), BatchAllowanceS: 0.5, CommitTS: e.commitTS}
	res.SegTakeover = r
	err := e.segTakeover(ctx, r, res)
	if err != nil {
		r.Error = err.Error()
	}
	return err
}

func (e *env) segTakeover(ctx context.Context, r *segTakeoverResult, res *results) error {
	c := e.cfg.segtake
	if c.workers.v < 2 {
		return fmt.Errorf("segtakeover needs at least 2 workers")
	}
	began := time.Now()
	shape := seed.Shape{Kind: seed.Hot, Param: 0.9}
	o := seed.Options{Contracts: c.contracts.v, RecordsPerContract: c.perContract.v, Seed: e.cfg.seed, Prefix: "c", Shape: shape}
	sizes, err := o.Sizes()
	if err != nil {
		return err
	}
	r.Shape, r.Seeded, r.HotContract, r.HotSeeded = shape.String(), o.Records(), o.ContractID(0), sizes[0]
	tplName := fmt.Sprintf("segtake_%d_%s_%d_s%d", o.Contracts, shapeSlug(shape), r.Seeded, e.cfg.seed)
	tpl, err := e.template(ctx, tplName, func(ctx context.Context, db *bun.DB) error {
		dir := filepath.Join(e.tmp, "data-"+tplName)
		tiers, recs, err := writeSeed(dir, o)
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		log.Printf("segtakeover: loading %d records, %d in %s", r.Seeded, r.HotSeeded, r.HotContract)
		if _, err := loadPricing(ctx, db, ingest.Options{TiersPath: tiers, RecordsPath: recs}); err != nil {
			return fmt.Errorf("loading the seed: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	defer e.dropTemplate(ctx, tpl)
	res.addCommand(fmt.Sprintf("worker seed --contracts %d --records-per-contract %d --shape %s --seed %d", o.Contracts, o.RecordsPerContract, shape, o.Seed))

	name, db, err := e.fresh(ctx, tpl, "segtake")
	if err != nil {
		return err
	}
	defer func() { db.Close(); e.dropDB(ctx, name) }()
	if err := dropPricedKey(ctx, db); err != nil {
		return err
	}
	offset, err := dbClockOffset(ctx, db)
	if err != nil {
		return err
	}
	tm := r.Timing
	hb := parseDur(tm.Heartbeat)
	args := append(tm.args(), "--batch-size", strconv.Itoa(c.batch.v), "--segment-records", strconv.Itoa(c.segmentRecords.v))
	r.Command = e.commandFor(designBaton, "w1", args)
	res.addCommand(r.Command)
	logDir := filepath.Join(e.tmp, "logs", "segtake")

	pctx, stopProducer := context.WithCancel(ctx)
	prod := &hotProducer{e: e, db: db, contract: r.HotContract, lowWater: int64(c.lowWater.v), chunk: c.chunk.v,
		rng: rand.New(rand.NewPCG(e.cfg.seed, 77))}
	prodDone := make(chan struct{})
	go func() { prod.run(pctx); close(prodDone) }()
	defer func() { stopProducer(); <-prodDone }()

	next := 1
	startOne := func() (*proc, error) {
		p, err := e.startBaton(e.url(name), logDir, fmt.Sprintf("w%d", next), args...)
		next++
		return p, err
	}
	var all, live []*proc
	defer func() { killAll(all) }()
	for range c.workers.v {
		p, err := startOne()
		if err != nil {
			return err
		}
		all, live = append(all, p), append(live, p)
	}
	wait := tm.bound() + 30*time.Second
	settle := max(1500*time.Millisecond, 6*hb)
	// The bound assumes a survivor below MaxPartitions: strike only when
	// the survivors have room for every partition with pending work.
	room := (c.workers.v - 1) * r.MaxPartitions
	log.Printf("segtakeover: %d × SIGKILL at %s, --segment-records %d", c.kills.v, tm, c.segmentRecords.v)
	var each, fromFreeze, evMS []float64
	var firstKill time.Time
	for i := 0; i < c.kills.v; i++ {
		time.Sleep(settle)
		v, k, err := pickSegmentVictim(ctx, db, live, room, time.Now().Add(90*time.Second))
		if err != nil {
			return err
		}
		freeze := v.frozen
		at := time.Now()
		if i == 0 {
			firstKill = at.Add(offset)
		}
		if err := v.p.signal(syscall.SIGKILL); err != nil {
			return err
		}
		if err := e.segResumes(ctx, db, v.p.id, &k, freeze.Add(offset), at.Add(offset), at.Add(wait)); err != nil {
			return err
		}
		k.FrozenS = at.Sub(freeze).Seconds()
		var got []string
		for j, s := range k.EachS {
			if s < 0 {
				r.TimedOut++
				continue
			}
			each = append(each, s*1000)
			fromFreeze = append(fromFreeze, (s+k.FrozenS)*1000)
			got = append(got, fmt.Sprintf("%.2f", s))
			if k.EventMS[j] >= 0 {
				evMS = append(evMS, float64(k.EventMS[j]))
			}
		}
		log.Printf("segtakeover: SIGKILL %d/%d of %s (%d segments, %d other partitions; %d pending partitions; frozen %.2fs before): %v s",
			i+1, c.kills.v, v.p.id, len(k.Segments), k.OtherHeld, k.Pending, k.FrozenS, got)
		r.Kills = append(r.Kills, k)
		select {
		case <-v.p.done:
		case <-time.After(20 * time.Second):
			return fmt.Errorf("%s did not exit after SIGKILL", v.p.id)
		}
		var keep []*proc
		for _, p := range live {
			if p != v.p {
				keep = append(keep, p)
			}
		}
		p, err := startOne()
		if err != nil {
			return err
		}
		all, live = append(all, p), append(keep, p)
	}
	r.Takeover, r.FromFreeze, r.EventTakeover = summarizeMs(each), summarizeMs(fromFreeze), summarizeMs(evMS)

	stopProducer()
	<-prodDone
	r.Produced, r.Loads = prod.Records, prod.Loads
	r.Drained = e.drain(ctx, db, 3*time.Minute)
	for _, p := range live {
		_ = p.signal(syscall.SIGTERM)
	}
	if err := waitAll(live, 30*time.Second); err != nil {
		log.Printf("segtakeover: stopping workers: %v", err)
	}
	r.WorkerEvents = sumEvents(all)
	if err := db.QueryRowContext(ctx, `SELECT count(DISTINCT partition_key) FROM baton.events WHERE kind = 'claimed' AND partition_key LIKE ? || '#%'`,
		r.HotContract).Scan(&r.SegmentRows); err != nil {
		return fmt.Errorf("counting segments: %w", err)
	}
	if r.LostCauses, err = lostCauses(ctx, db, firstKill); err != nil {
		return err
	}
	if err := db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM baton.records), (SELECT count(*) FROM baton.priced)`).Scan(&r.Records, &r.Priced); err != nil {
		return fmt.Errorf("counting records: %w", err)
	}
	log.Printf("segtakeover: verifying %d records", r.Records)
	if r.Duplicates, r.Lost, r.Mismatches, err = outcome(ctx, db); err != nil {
		return err
	}
	r.WallSeconds = time.Since(began).Seconds()
	log.Printf("segtakeover: %d segments over %d kills: p50 %.0fms p99 %.0fms max %.0fms (bound %.1fs + one batch); %d did not resume; %d duplicates, %d lost, %d mismatches",
		r.Takeover.N, len(r.Kills), r.Takeover.P50, r.Takeover.P99, r.Takeover.Max, r.BoundS, r.TimedOut, r.Duplicates, r.Lost, r.Mismatches)
	if !r.Drained {
		return fmt.Errorf("the backlog was not priced within 3 minutes of the last kill")
	}
	return nil
}

// lostCause is a count of lost events with one cause.
type lostCause struct {
	Segment bool `json:"segment"`
	// DuringKills: at or after the first kill (else while the seed's
	// first segments were priced, before it).
	DuringKills bool   `json:"during_kills"`
	Cause       string `json:"cause"`
	N           int    `json:"n"`
}

// lostCauses groups the events table's lost events by their detail, with
// partition keys and versions left out.
func lostCauses(ctx context.Context, db bun.IDB, firstKill time.Time) ([]lostCause, error) {
	rows, err := db.QueryContext(ctx, `
		SELECT segment, during, cause, count(*) FROM (
		    SELECT e.partition_key LIKE '%#%' AS segment, e.at >= ? AS during,
		           left(regexp_replace(coalesce(e.detail, ''), '[^ ]*#[0-9]+|[0-9]+', 'N', 'g'), 200) AS cause
		    FROM baton.events e WHERE e.kind = ?) x
		GROUP BY 1, 2, 3 ORDER BY 4 DESC LIMIT 10`, firstKill, string(partition.EventLost))
	if err != nil {
		return nil, fmt.Errorf("reading lost events: %w", err)
	}
	defer rows.Close()
	var out []lostCause
	for rows.Next() {
		var c lostCause
		if err := rows.Scan(&c.Segment, &c.DuringKills, &c.Cause, &c.N); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// segVictim is a frozen worker and when it was frozen.
type segVictim struct {
	p      *proc
	frozen time.Time
}

// pickSegmentVictim waits until at most room partitions have pending work,
// then freezes (SIGSTOP) the live worker holding the most segments with
// pending work, and returns it with those segments. The caller kills it.
func pickSegmentVictim(ctx context.Context, db bun.IDB, ps []*proc, room int, deadline time.Time) (*segVictim, segTakeKill, error) {
	var k segTakeKill
	for time.Now().Before(deadline) {
		pending, err := pendingPartitions(ctx, db)
		if err != nil {
			return nil, k, err
		}
		var best *proc
		most := 0
		if pending <= room {
			for _, p := range ps {
				if !p.running() {
					continue
				}
				segs, _, err := heldSegments(ctx, db, p.id)
				if err != nil {
					return nil, k, err
				}
				if len(segs) > most {
					best, most = p, len(segs)
				}
			}
		}
		if best != nil {
			frozen := time.Now()
			if err := best.signal(syscall.SIGSTOP); err != nil {
				return nil, k, err
			}
			time.Sleep(settleAfterFreeze)
			segs, other, err := heldSegments(ctx, db, best.id)
			if err == nil {
				pending, err = pendingPartitions(ctx, db)
			}
			if err != nil {
				_ = best.signal(syscall.SIGCONT)
				return nil, k, err
			}
			if len(segs) > 0 {
				return &segVictim{p: best, frozen: frozen}, segTakeKill{Victim: best.id, Segments: segs, OtherHeld: other, Pending: pending}, nil
			}
			_ = best.signal(syscall.SIGCONT)
		}
		select {
		case <-ctx.Done():
			return nil, k, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil, k, fmt.Errorf("no worker held a segment with pending work while at most %d partitions had pending work", room)
}

// heldSegments returns the segments with pending work that worker id
// holds, and how many other partitions with pending work it holds.
func heldSegments(ctx context.Context, db bun.IDB, id string) ([]string, int, error) {
	rows, err := db.QueryContext(ctx, `SELECT partition_key, segment_of IS NOT NULL FROM baton.tasks
		WHERE owner LIKE ? || '#%' AND position < available ORDER BY partition_key`, id)
	if err != nil {
		return nil, 0, fmt.Errorf("reading partitions held by %s: %w", id, err)
	}
	defer rows.Close()
	var segs []string
	other := 0
	for rows.Next() {
		var key string
		var seg bool
		if err := rows.Scan(&key, &seg); err != nil {
			return nil, 0, err
		}
		if seg {
			if _, _, ok := partition.ParseSegmentKey(key); !ok {
				return nil, 0, fmt.Errorf("segment row %q: not a segment key", key)
			}
			segs = append(segs, key)
		} else {
			other++
		}
	}
	return segs, other, rows.Err()
}

// pendingPartitions counts the task rows with pending work.
func pendingPartitions(ctx context.Context, db bun.IDB) (int, error) {
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM baton.tasks WHERE position < available AND failed_at IS NULL`).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting partitions with pending work: %w", err)
	}
	return n, nil
}

// segResumes polls the events table until every segment of k has a
// first_batch event by a worker other than victim after the freeze
// (database clock), or until giveUp (local clock), and fills k.EachS,
// k.EventMS and k.By. Times are from the kill (dbKill, database clock) to
// the event row's commit timestamp, or its insertion time (clock_timestamp
// in the batch, before the commit) without commit timestamps.
func (e *env) segResumes(ctx context.Context, db bun.IDB, victim string, k *segTakeKill, dbFreeze, dbKill, giveUp time.Time) error {
	at := "at"
	if e.commitTS {
		at = "coalesce(pg_xact_commit_timestamp(xmin), at)"
	}
	q := fmt.Sprintf(`SELECT %[1]s, coalesce(takeover_ms, -1), worker FROM baton.events
		WHERE partition_key = ? AND kind = ? AND worker NOT LIKE ? || '#%%' AND at > ?
		ORDER BY %[1]s LIMIT 1`, at)
	type found struct {
		ts time.Time
		ms int64
		by string
	}
	got := map[string]found{}
	for {
		for _, key := range k.Segments {
			if _, ok := got[key]; ok {
				continue
			}
			var f found
			var by sql.NullString
			err := db.QueryRowContext(ctx, q, key, string(partition.EventFirstBatch), victim, dbFreeze).Scan(&f.ts, &f.ms, &by)
			if err == sql.ErrNoRows {
				continue
			}
			if err != nil {
				return fmt.Errorf("reading the first batch on %s: %w", key, err)
			}
			f.by = by.String
			got[key] = f
		}
		if len(got) == len(k.Segments) || time.Now().After(giveUp) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	for _, key := range k.Segments {
		f, ok := got[key]
		if !ok {
			k.EachS, k.EventMS, k.By = append(k.EachS, -1), append(k.EventMS, -1), append(k.By, "")
			continue
		}
		k.EachS = append(k.EachS, max(0, f.ts.Sub(dbKill)).Seconds())
		k.EventMS = append(k.EventMS, f.ms)
		k.By = append(k.By, f.by)
	}
	return nil
}

// hotProducer keeps one contract growing while workers run: whenever
// fewer than lowWater records are pending it appends chunk records to it
// through baton's loader, so the contract is split into segments again.
type hotProducer struct {
	e        *env
	db       *bun.DB
	contract string
	lowWater int64
	chunk    int
	rng      *rand.Rand
	n        int
	Loads    int
	Records  int64
}

func (p *hotProducer) run(ctx context.Context) {
	feedWhileLow(ctx, p.db, p.lowWater, "segtakeover producer", p.load)
}

func (p *hotProducer) load(ctx context.Context) error {
	p.n++
	path := filepath.Join(p.e.tmp, fmt.Sprintf("segtake-produce-%d.csv", p.n))
	defer os.Remove(path)
	err := writeFile(path, func(w *bufio.Writer) error {
		w.WriteString("contract_id,record_id,amount_minor\n")
		var buf []byte
		for j := range p.chunk {
			buf = appendProduced(buf[:0], p.contract, "s", p.n, j, p.rng)
			if _, err := w.Write(buf); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	rep, err := loadPricing(ctx, p.db, ingest.Options{RecordsPath: path})
	if err != nil {
		return fmt.Errorf("loading produced records: %w", err)
	}
	p.Loads++
	p.Records += rep.RecordsAccepted
	return nil
}
