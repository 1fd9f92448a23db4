package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/uptrace/bun"
)

// victim is a worker frozen (SIGSTOP) while the contracts it holds are
// read, so the set cannot change under the reading.
type victim struct {
	p    *proc
	held map[string]int64 // contract → committed position when frozen
}

// settleAfterFreeze lets the server finish what a frozen worker had
// already sent before its holdings are read.
const settleAfterFreeze = 200 * time.Millisecond

// pickVictim freezes the running worker that holds the most contracts with
// pending work and returns it with what it holds. The caller kills it,
// leaves it stopped, or resumes it.
func pickVictim(ctx context.Context, db bun.IDB, d design, ps []*proc, deadline time.Time) (*victim, error) {
	for time.Now().Before(deadline) {
		var best *proc
		most := 0
		for _, p := range ps {
			if !p.running() {
				continue
			}
			h, err := d.held(ctx, db, p.id)
			if err != nil {
				return nil, err
			}
			if len(h) > most {
				best, most = p, len(h)
			}
		}
		if best != nil {
			if err := best.signal(syscall.SIGSTOP); err != nil {
				return nil, err
			}
			// Statements the worker sent before it froze (a COMMIT, which
			// ends a SKIP LOCKED row lock) finish on the server meanwhile.
			time.Sleep(settleAfterFreeze)
			h, err := d.held(ctx, db, best.id)
			if err != nil {
				_ = best.signal(syscall.SIGCONT)
				return nil, err
			}
			if len(h) > 0 {
				return &victim{p: best, held: h}, nil
			}
			// It let go between the two reads: try again.
			_ = best.signal(syscall.SIGCONT)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil, errors.New("no worker held a contract with pending work")
}

// resumption is when other workers first committed on the contracts a
// victim held.
type resumption struct {
	First   time.Duration // to the first commit by another worker on any of them
	All     time.Duration // to the moment every one of them had one
	Resumed int           // how many had one within the wait
	Held    int
	Each    []time.Duration
}

// waitResume polls until every contract the victim held has a batch
// committed by another worker after its position at the freeze, or until
// giveUp after at (the signal). Times are the commit times recorded by the
// database (e.commitTime), relative to at on the database clock, so the
// polling interval does not add to them.
func (e *env) waitResume(ctx context.Context, db bun.IDB, v *victim, at time.Time, offset, giveUp time.Duration) (resumption, error) {
	r := resumption{Held: len(v.held)}
	dbAt := at.Add(offset)
	found := map[string]time.Time{}
	q := fmt.Sprintf(`SELECT min(%s) FROM baton.priced
		WHERE contract_id = ? AND seq > ? AND priced_by <> ? AND priced_by NOT LIKE ? || '#%%'`, e.commitTime())
	deadline := at.Add(giveUp)
	for len(found) < len(v.held) {
		for c, pos := range v.held {
			if _, ok := found[c]; ok {
				continue
			}
			var ts sql.NullTime
			if err := db.QueryRowContext(ctx, q, c, pos, v.p.id, v.p.id).Scan(&ts); err != nil {
				return r, fmt.Errorf("reading commits on %s: %w", c, err)
			}
			if ts.Valid {
				found[c] = ts.Time
			}
		}
		if len(found) == len(v.held) || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	r.Resumed = len(found)
	for _, ts := range found {
		r.Each = append(r.Each, max(0, ts.Sub(dbAt)))
	}
	sort.Slice(r.Each, func(i, j int) bool { return r.Each[i] < r.Each[j] })
	if len(r.Each) > 0 {
		r.First = r.Each[0]
		r.All = r.Each[len(r.Each)-1]
	}
	return r, nil
}

// faultResult is one SIGKILL or SIGSTOP experiment on one design.
type faultResult struct {
	Design       string    `json:"design"`
	Signal       string    `json:"signal"`
	Workers      int       `json:"workers"`
	Victim       string    `json:"victim"`
	Held         int       `json:"held"`
	Resumed      int       `json:"resumed"`
	FirstS       float64   `json:"first_resume_s"` // -1: none within the give-up
	AllS         float64   `json:"all_resumed_s"`  // -1: not all within the give-up
	EachS        []float64 `json:"each_resume_s"`
	GiveUpS      float64   `json:"give_up_s"`
	StoppedS     float64   `json:"stopped_s,omitempty"`
	Finished     bool      `json:"finished"`
	Duplicates   int64     `json:"duplicates"`
	Lost         int64     `json:"lost"`
	Mismatches   int       `json:"mismatches"`
	Seconds      float64   `json:"seconds"`
	VictimEvents events    `json:"victim_events"`
	VictimLog    []string  `json:"victim_log,omitempty"`
	Command      string    `json:"command"`
}

// dropPricedKey replaces priced_rows' unique key with a plain index, so that
// a design that prices a record twice shows it as a duplicate row instead
// of a failed batch: the experiments measure the design's own guarantee,
// not the last line of defence.
func dropPricedKey(ctx context.Context, db bun.IDB) error {
	for _, s := range []string{
		`DROP INDEX baton.priced_rows_key`,
		`CREATE INDEX priced_rows_contract_seq ON baton.priced_rows (contract_id, seq, generation DESC)`,
	} {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("replacing priced_rows' unique key: %w", err)
		}
	}
	return nil
}

// outcome counts duplicated and unpriced records and verifies the output.
func outcome(ctx context.Context, db *bun.DB) (dups, lost int64, mismatches int, err error) {
	if err = db.QueryRowContext(ctx, `SELECT count(*) - count(DISTINCT (contract_id, seq, generation)) FROM baton.priced_rows`).Scan(&dups); err != nil {
		return 0, 0, 0, fmt.Errorf("counting duplicates: %w", err)
	}
	if err = db.QueryRowContext(ctx, `SELECT count(*) FROM baton.records r
		WHERE NOT EXISTS (SELECT 1 FROM baton.priced p WHERE p.contract_id = r.contract_id AND p.seq = r.seq)`).Scan(&lost); err != nil {
		return 0, 0, 0, fmt.Errorf("counting unpriced records: %w", err)
	}
	sum, err := verify(ctx, db)
	if err != nil {
		return 0, 0, 0, err
	}
	return dups, lost, sum, nil
}

// faultExperiment runs the fault data set with faultWorkers workers of
// design d, and part-way through SIGKILLs or SIGSTOPs the worker holding
// the most contracts; it measures how long until others resume them, then
// (SIGSTOP) resumes the victim, lets everything finish and counts
// duplicated and lost records.
func (e *env) faultExperiment(ctx context.Context, ds *dataset, d design, sig syscall.Signal) (faultResult, error) {
	cfg := e.cfg
	r := faultResult{Design: d.Name, Signal: sigName(sig), Workers: cfg.faultWorkers, GiveUpS: cfg.giveUp.Seconds(), FirstS: -1, AllS: -1}
	name, db, err := e.fresh(ctx, ds.template, "fault")
	if err != nil {
		return r, err
	}
	defer func() { db.Close(); e.dropDB(ctx, name) }()
	if err := d.prepare(ctx, db); err != nil {
		return r, err
	}
	if err := dropPricedKey(ctx, db); err != nil {
		return r, err
	}
	offset, err := dbClockOffset(ctx, db)
	if err != nil {
		return r, err
	}
	args := d.workerArgs(cfg.faultBatch, &timingFast, cfg.peerConc)
	r.Command = e.commandFor(d, "w1", args)
	logDir := fmt.Sprintf("%s/logs/fault-%s-%s", e.tmp, d.Name, r.Signal)
	log.Printf("peers: %s, %s of a busy worker", d.Name, r.Signal)
	start := time.Now()
	var ps []*proc
	for i := 1; i <= cfg.faultWorkers; i++ {
		p, err := e.startWorker(d, e.url(name), logDir, fmt.Sprintf("w%d", i), args)
		if err != nil {
			killAll(ps)
			return r, err
		}
		ps = append(ps, p)
	}
	defer killAll(ps)
	// Strike once a fifth of the work is done.
	for {
		left, err := d.pending(ctx, db)
		if err != nil {
			return r, err
		}
		if left <= ds.Records*4/5 {
			break
		}
		if time.Since(start) > 2*time.Minute {
			return r, fmt.Errorf("%s: no progress within 2 minutes", d.Name)
		}
		time.Sleep(20 * time.Millisecond)
	}
	v, err := pickVictim(ctx, db, d, ps, time.Now().Add(30*time.Second))
	if err != nil {
		return r, err
	}
	r.Victim, r.Held = v.p.id, len(v.held)
	at := time.Now()
	if sig == syscall.SIGKILL {
		if err := v.p.signal(syscall.SIGKILL); err != nil {
			return r, err
		}
	}
	res, err := e.waitResume(ctx, db, v, at, offset, cfg.giveUp)
	if err != nil {
		return r, err
	}
	if sig == syscall.SIGSTOP {
		_ = v.p.signal(syscall.SIGCONT)
		r.StoppedS = time.Since(at).Seconds()
	}
	r.Resumed = res.Resumed
	for _, d := range res.Each {
		r.EachS = append(r.EachS, d.Seconds())
	}
	if res.Resumed > 0 {
		r.FirstS = res.First.Seconds()
	}
	if res.Resumed == res.Held {
		r.AllS = res.All.Seconds()
	}
	log.Printf("peers: %s %s: held %d, resumed %d, first %.2fs, all %.2fs", d.Name, r.Signal, r.Held, r.Resumed, r.FirstS, r.AllS)
	werr := waitAll(ps, 3*time.Minute)
	r.Finished = werr == nil
	r.Seconds = time.Since(start).Seconds()
	if r.Duplicates, r.Lost, r.Mismatches, err = outcome(ctx, db); err != nil {
		return r, err
	}
	r.VictimEvents = countEvents(v.p.logPath)
	r.VictimLog = interestingLines(v.p.logPath, 6)
	expected := map[string]bool{v.p.id: true}
	if err := failed(ps, expected); err != nil {
		log.Printf("peers: %s %s: %v", d.Name, r.Signal, err)
	}
	return r, nil
}

func sigName(s syscall.Signal) string {
	switch s {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGSTOP:
		return "SIGSTOP"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}

// verify runs the independent SQL recomputation and returns the number of
// contracts that disagree.
func verify(ctx context.Context, db *bun.DB) (int, error) {
	sum, err := verifyPricing(ctx, db)
	if err != nil {
		return 0, err
	}
	return len(sum.Mismatches), nil
}

// interestingLines returns up to n log lines of a worker that say how it
// noticed its loss (lost, fenced, failed sessions), for the report.
func interestingLines(path string, n int) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, `"event":"lost"`) || strings.Contains(l, `"event":"fenced"`) ||
			strings.Contains(l, `"event":"session_error"`) || strings.Contains(l, `"level":"ERROR"`) {
			out = append(out, oneLine(l, 300))
			if len(out) == n {
				break
			}
		}
	}
	return out
}
