package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/batonhq/baton/internal/pgxconn"
)

// The COPY set-up micro-benchmark of the versions scenario. A batch of the
// pricer writes its priced rows with one binary COPY (pgx's CopyFrom,
// which first describes the target's columns), or with one INSERT when
// the batch has a single line. On 15 a COPY cost about 1 ms of server CPU
// whatever its size (docs/benchmarks.md), which is why batches are sized
// by time. Here one connection runs transactions that each write priced
// rows one way, and its backend's CPU time (from /proc) is read
// around each run of them: the set-up is a one-row COPY's CPU less a
// one-row INSERT's, the cost per row comes from a COPY of copySetupRows.

// copySetupRows is the rows of the large COPY: the size a partition's
// first batches start at (min(--batch-size, 1000)).
const copySetupRows = 1000

// copySetup is the micro-benchmark's result: backend CPU per transaction
// (BEGIN, the write, COMMIT) in µs for each way of writing.
type copySetup struct {
	Transactions int     `json:"transactions"` // of each kind
	Rows         int     `json:"rows"`         // of the large COPY
	InsertOneUS  float64 `json:"insert_one_us"`
	CopyOneUS    float64 `json:"copy_one_us"`
	CopyManyUS   float64 `json:"copy_many_us"`
	// WallCopyOneMS is the mean wall time of a one-row COPY transaction
	// (synchronous_commit off: no wait for the WAL flush), for scale.
	WallCopyOneMS float64 `json:"wall_copy_one_ms"`
}

// SetupUS is what a COPY costs beyond the same row's INSERT.
func (c *copySetup) SetupUS() float64 { return c.CopyOneUS - c.InsertOneUS }

// PerRowUS is the CPU of each further row of a COPY.
func (c *copySetup) PerRowUS() float64 {
	if c.Rows < 2 {
		return 0
	}
	return (c.CopyManyUS - c.CopyOneUS) / float64(c.Rows-1)
}

// copySetupTransactions is how many transactions of each kind are timed
// (where /proc has no schedstat the CPU clock's resolution is 10 ms, so
// the total of each kind must be far above it).
func (c config) copySetupTransactions() int {
	if c.quick {
		return 150
	}
	return 500
}

// measureCopySetup runs the micro-benchmark in a fresh migrated database.
// The three kinds alternate in rounds, so that a change of the machine's
// load during the measurement falls on each alike.
func (e *env) measureCopySetup(ctx context.Context) (*copySetup, error) {
	if e.external {
		return nil, fmt.Errorf("the server is not private: its backend's CPU cannot be read")
	}
	tpl, err := e.template(ctx, "copysetup", nil)
	if err != nil {
		return nil, err
	}
	name, db, err := e.fresh(ctx, tpl, "copysetup")
	if err != nil {
		return nil, err
	}
	defer func() { db.Close(); e.dropDB(ctx, name) }()
	if _, err := db.ExecContext(ctx, `CREATE TABLE copy_probe (LIKE baton.priced_rows INCLUDING ALL);
		ALTER TABLE copy_probe ALTER COLUMN generation SET DEFAULT 1`); err != nil {
		return nil, fmt.Errorf("creating copy_probe: %w", err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("opening a connection for the COPY set-up: %w", err)
	}
	defer conn.Close()
	n := e.cfg.copySetupTransactions()
	c := &copySetup{Transactions: n, Rows: copySetupRows}
	err = pgxconn.Raw(conn.Conn, func(pc *pgx.Conn) error {
		p := &copyProbe{pc: pc, tick: clockTicks()}
		if err := pc.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&p.pid); err != nil {
			return fmt.Errorf("reading the backend's pid: %w", err)
		}
		// The commits do not wait for their WAL flush: a wait costs no
		// CPU, and on a busy machine it would make the run long.
		if _, err := pc.Exec(ctx, `SET synchronous_commit = off`); err != nil {
			return fmt.Errorf("turning synchronous_commit off: %w", err)
		}
		kinds := []struct {
			total *float64
			write func(context.Context) error
		}{
			{&c.InsertOneUS, p.insertOne},
			{&c.CopyOneUS, func(ctx context.Context) error { return p.copyRows(ctx, 1) }},
			{&c.CopyManyUS, func(ctx context.Context) error { return p.copyRows(ctx, copySetupRows) }},
		}
		// One untimed round first: the connection's caches and the
		// table's first pages.
		for _, k := range kinds {
			if _, _, err := p.run(ctx, 5, k.write); err != nil {
				return err
			}
		}
		const rounds = 5
		var wallOne time.Duration
		for r := range rounds {
			per := n / rounds
			for i, k := range kinds {
				cpu, wall, err := p.run(ctx, per, k.write)
				if err != nil {
					return err
				}
				*k.total += cpu.Seconds() * 1e6
				if i == 1 {
					wallOne += wall
				}
			}
			log.Printf("copy set-up: round %d/%d", r+1, rounds)
		}
		done := float64(n / rounds * rounds)
		c.InsertOneUS, c.CopyOneUS, c.CopyManyUS = c.InsertOneUS/done, c.CopyOneUS/done, c.CopyManyUS/done
		c.WallCopyOneMS = wallOne.Seconds() * 1000 / done
		return nil
	})
	if err != nil {
		return c, fmt.Errorf("measuring the COPY set-up: %w", err)
	}
	log.Printf("copy set-up: backend CPU per transaction: INSERT of 1 row %.0f µs, COPY of 1 row %.0f µs, COPY of %d rows %.0f µs: set-up %.0f µs, %.2f µs a row",
		c.InsertOneUS, c.CopyOneUS, c.Rows, c.CopyManyUS, c.SetupUS(), c.PerRowUS())
	return c, nil
}

// copyProbe is the connection the micro-benchmark writes through and its
// backend process.
type copyProbe struct {
	pc   *pgx.Conn
	pid  int
	tick float64
	seq  int64
	vals []any
}

var copyProbeColumns = []string{"contract_id", "seq", "record_id", "gross_minor", "discount_minor", "net_minor", "claim_version", "priced_by"}

// run times n transactions of write: the backend's CPU and the wall time.
func (p *copyProbe) run(ctx context.Context, n int, write func(context.Context) error) (cpu, wall time.Duration, err error) {
	before, err := p.backendCPU()
	if err != nil {
		return 0, 0, err
	}
	t0 := time.Now()
	for range n {
		tx, err := p.pc.Begin(ctx)
		if err != nil {
			return 0, 0, fmt.Errorf("beginning a transaction: %w", err)
		}
		if err := write(ctx); err != nil {
			_ = tx.Rollback(ctx)
			return 0, 0, err
		}
		if err := tx.Commit(ctx); err != nil {
			return 0, 0, fmt.Errorf("committing: %w", err)
		}
	}
	wall = time.Since(t0)
	after, err := p.backendCPU()
	if err != nil {
		return 0, 0, err
	}
	return after - before, wall, nil
}

// backendCPU is the backend process's time on a CPU: from
// /proc/<pid>/schedstat, in nanoseconds, or else utime + stime from
// /proc/<pid>/stat, in clock ticks.
func (p *copyProbe) backendCPU() (time.Duration, error) {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", p.pid)); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			if ns, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				return time.Duration(ns), nil
			}
		}
	}
	st, err := readStat(p.pid)
	if err != nil {
		return 0, fmt.Errorf("reading the backend's CPU: %w", err)
	}
	return time.Duration(float64(st.utime+st.stime) / p.tick * float64(time.Second)), nil
}

// row returns the values of the next priced row (the vals slice is reused).
func (p *copyProbe) row() []any {
	p.seq++
	if p.vals == nil {
		p.vals = []any{"probe", int64(0), "", int64(1234), int64(34), int64(1200), int64(1), "copysetup#1"}
	}
	p.vals[1], p.vals[2] = p.seq, fmt.Sprintf("r%d", p.seq)
	return p.vals
}

func (p *copyProbe) insertOne(ctx context.Context) error {
	_, err := p.pc.Exec(ctx, `INSERT INTO copy_probe (contract_id, seq, record_id, gross_minor, discount_minor, net_minor, claim_version, priced_by)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, append([]any{pgx.QueryExecModeCacheDescribe}, p.row()...)...)
	if err != nil {
		return fmt.Errorf("inserting a row: %w", err)
	}
	return nil
}

func (p *copyProbe) copyRows(ctx context.Context, n int) error {
	i := 0
	got, err := p.pc.CopyFrom(ctx, pgx.Identifier{"copy_probe"}, copyProbeColumns, pgx.CopyFromFunc(func() ([]any, error) {
		if i == n {
			return nil, nil
		}
		i++
		return p.row(), nil
	}))
	if err == nil && got != int64(n) {
		err = fmt.Errorf("copied %d rows, want %d", got, n)
	}
	if err != nil {
		return fmt.Errorf("copying %d rows: %w", n, err)
	}
	return nil
}
