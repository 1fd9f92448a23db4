package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/uptrace/bun"
)

// stageProc is one worker process of a scale stage, run to its end.
type stageProc struct {
	ID      string  `json:"id"`
	Command string  `json:"command"`
	Seconds float64 `json:"seconds"`
	// PeakRSS is the process's maximum resident set size, from the
	// rusage wait4 returned for it.
	PeakRSS int64   `json:"peak_rss_bytes"`
	CPU     float64 `json:"cpu_s"`
}

// runStageProc runs one worker command (args after "worker") against
// dbURL until it exits, its standard output to stdout (its log when nil),
// its standard error to logDir/id.log, for at most timeout.
func (e *env) runStageProc(ctx context.Context, timeout time.Duration, dbURL, logDir, id string, stdout io.Writer, res *results, args ...string) (stageProc, error) {
	ps, _, err := e.runStage(ctx, timeout, dbURL, logDir, res, []stageSpec{{id: id, stdout: stdout, args: args}})
	if len(ps) == 0 {
		return stageProc{}, err
	}
	return ps[0], err
}

// runStageProcs runs worker commands at once, named w1, w2…, and returns
// them with the time from the first start to the last exit.
func (e *env) runStageProcs(ctx context.Context, timeout time.Duration, dbURL, logDir string, res *results, args [][]string) ([]stageProc, float64, error) {
	specs := make([]stageSpec, len(args))
	for i, a := range args {
		specs[i] = stageSpec{id: fmt.Sprintf("w%d", i+1), args: a}
	}
	return e.runStage(ctx, timeout, dbURL, logDir, res, specs)
}

type stageSpec struct {
	id     string
	stdout io.Writer
	args   []string
}

func (e *env) runStage(ctx context.Context, timeout time.Duration, dbURL, logDir string, res *results, specs []stageSpec) ([]stageProc, float64, error) {
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, 0, fmt.Errorf("creating %s: %w", logDir, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out := make([]stageProc, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	start := time.Now()
	for i, s := range specs {
		out[i] = stageProc{ID: s.id, Command: commandLine("<tmp>/worker", e.hideTmp(s.args))}
		res.addCommand(out[i].Command)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = e.runOne(ctx, dbURL, filepath.Join(logDir, s.id+".log"), s, &out[i])
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	if err := errors.Join(errs...); err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return out, secs, fmt.Errorf("not finished within %s (-scale-stage-timeout): %w", timeout, err)
		}
		return out, secs, err
	}
	return out, secs, nil
}

// runOne runs one process to its end and fills p's time, CPU and peak RSS.
func (e *env) runOne(ctx context.Context, dbURL, logPath string, s stageSpec, p *stageProc) error {
	f, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("creating worker log: %w", err)
	}
	defer f.Close()
	cmd := exec.CommandContext(ctx, e.workerBin, s.args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL)
	cmd.Stdout, cmd.Stderr = f, f
	if s.stdout != nil {
		cmd.Stdout = s.stdout
	}
	// Own process group: a Ctrl-C of the bench does not reach the
	// worker, which the bench ends itself (the context kills it).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 10 * time.Second
	t0 := time.Now()
	err = cmd.Run()
	p.Seconds = time.Since(t0).Seconds()
	if ps := cmd.ProcessState; ps != nil {
		p.CPU = (ps.UserTime() + ps.SystemTime()).Seconds()
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			p.PeakRSS = maxrssBytes(ru.Maxrss)
		}
	}
	if err != nil {
		return fmt.Errorf("worker %s (%s): %w; last log lines:\n%s", s.args[0], s.id, err, tail(logPath, 8))
	}
	return nil
}

// maxrssBytes converts rusage's ru_maxrss to bytes: kilobytes on Linux,
// bytes on macOS.
func maxrssBytes(v int64) int64 {
	if runtime.GOOS == "darwin" {
		return v
	}
	return v * 1024
}

// hideTmp writes the scratch directory as <tmp> in a command line.
func (e *env) hideTmp(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = strings.ReplaceAll(a, e.tmp, "<tmp>")
	}
	return out
}

// lineCounter counts the bytes and lines written to it and keeps none.
type lineCounter struct {
	bytes, lines int64
}

func (c *lineCounter) Write(p []byte) (int, error) {
	c.bytes += int64(len(p))
	c.lines += int64(bytes.Count(p, []byte{'\n'}))
	return len(p), nil
}

// diskCheck is the free space found before a run and the estimate of
// what the run needs.
type diskCheck struct {
	Path        string  `json:"-"` // the scratch directory, machine-specific
	FreeBytes   int64   `json:"free_bytes"`
	NeededBytes int64   `json:"needed_bytes"`
	DBPerRecord float64 `json:"db_bytes_per_record"`
	// Server is whether the database's files are on that disk too (a
	// private server); with DATABASE_URL only the CSV's are counted.
	Server bool `json:"server"`
}

// Defaults of the disk estimate before anything was measured: about 200
// bytes per record in the database (records, priced and their keys) and
// 22 in the CSV.
const (
	defaultDBPerRecord  = 200
	defaultCSVPerRecord = 22
	// diskMargin covers the WAL (max_wal_size 4GB) and the server's
	// other files.
	diskMargin = 5 << 30
)

// scaleDiskNeed estimates the bytes a run of n records needs on the disk
// of the scratch directory: the CSV, and when the server's files are
// there, the database with a third more for the loader's staging and
// dead rows, plus the WAL.
func scaleDiskNeed(n int64, dbPerRecord, csvPerRecord float64, server bool) int64 {
	if dbPerRecord <= 0 {
		dbPerRecord = defaultDBPerRecord
	}
	if csvPerRecord <= 0 {
		csvPerRecord = defaultCSVPerRecord
	}
	need := float64(n) * csvPerRecord
	if server {
		need += float64(n)*dbPerRecord*4/3 + diskMargin
	}
	return int64(need)
}

// checkDisk refuses a run of n records the scratch directory's disk has
// no room for.
func (e *env) checkDisk(n int64, dbPerRecord, csvPerRecord float64) (diskCheck, error) {
	d := diskCheck{Path: e.tmp, Server: !e.external, DBPerRecord: dbPerRecord}
	if d.DBPerRecord <= 0 {
		d.DBPerRecord = defaultDBPerRecord
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(e.tmp, &st); err != nil {
		return d, fmt.Errorf("checking free disk space in %s: %w", e.tmp, err)
	}
	d.FreeBytes = int64(st.Bavail) * int64(st.Bsize)
	d.NeededBytes = scaleDiskNeed(n, dbPerRecord, csvPerRecord, d.Server)
	if e.external {
		log.Printf("scale: DATABASE_URL is set: the server's disk is not checked (it needs about %s for %d records)",
			gib(scaleDiskNeed(n, dbPerRecord, 0, true)-scaleDiskNeed(n, dbPerRecord, 0, false)), n)
	}
	if err := d.enough(n); err != nil {
		return d, err
	}
	log.Printf("scale: %d records need about %s of disk in %s, %s free", n, gib(d.NeededBytes), d.Path, gib(d.FreeBytes))
	return d, nil
}

// enough says why the disk is too small for n records, or nil.
func (d diskCheck) enough(n int64) error {
	if d.FreeBytes >= d.NeededBytes {
		return nil
	}
	what := "the CSV"
	if d.Server {
		what = fmt.Sprintf("the CSV, the database at %.0f bytes per record and the WAL", d.DBPerRecord)
	}
	return fmt.Errorf("not enough disk space for %d records: %s free in %s, about %s needed (%s); free some or lower -scale-records",
		n, gib(d.FreeBytes), d.Path, gib(d.NeededBytes), what)
}

func gib(b int64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }

// tableSize is one table's bytes: heap (with its free space and
// visibility maps), TOAST (with its index) and each index.
type tableSize struct {
	Table   string      `json:"table"`
	Rows    int64       `json:"rows_estimate"`
	Heap    int64       `json:"heap_bytes"`
	Toast   int64       `json:"toast_bytes"`
	Indexes []indexSize `json:"indexes"`
}

type indexSize struct {
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"`
}

// IndexBytes is the sum of the table's indexes.
func (t tableSize) IndexBytes() int64 {
	var n int64
	for _, i := range t.Indexes {
		n += i.Bytes
	}
	return n
}

func (t tableSize) total() int64 { return t.Heap + t.Toast + t.IndexBytes() }

// tableSizes measures every table of schema and the whole database.
func tableSizes(ctx context.Context, db bun.IDB, schemaName string) ([]tableSize, int64, error) {
	rows, err := db.QueryContext(ctx, `
		SELECT c.relname,
		       greatest(c.reltuples, 0)::bigint,
		       pg_table_size(c.oid) - coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0),
		       coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = ? AND c.relkind IN ('r', 'p', 'm')
		ORDER BY pg_total_relation_size(c.oid) DESC, c.relname`, schemaName)
	if err != nil {
		return nil, 0, fmt.Errorf("measuring the tables of %s: %w", schemaName, err)
	}
	var out []tableSize
	byName := map[string]int{}
	for rows.Next() {
		var t tableSize
		if err := rows.Scan(&t.Table, &t.Rows, &t.Heap, &t.Toast); err != nil {
			rows.Close()
			return nil, 0, fmt.Errorf("measuring the tables of %s: %w", schemaName, err)
		}
		byName[t.Table] = len(out)
		out = append(out, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("measuring the tables of %s: %w", schemaName, err)
	}
	irows, err := db.QueryContext(ctx, `
		SELECT t.relname, ic.relname, pg_relation_size(ic.oid)
		FROM pg_index i
		JOIN pg_class ic ON ic.oid = i.indexrelid
		JOIN pg_class t ON t.oid = i.indrelid
		JOIN pg_namespace n ON n.oid = t.relnamespace
		WHERE n.nspname = ?
		ORDER BY 3 DESC, 2`, schemaName)
	if err != nil {
		return nil, 0, fmt.Errorf("measuring the indexes of %s: %w", schemaName, err)
	}
	defer irows.Close()
	for irows.Next() {
		var table string
		var ix indexSize
		if err := irows.Scan(&table, &ix.Name, &ix.Bytes); err != nil {
			return nil, 0, fmt.Errorf("measuring the indexes of %s: %w", schemaName, err)
		}
		if i, ok := byName[table]; ok {
			out[i].Indexes = append(out[i].Indexes, ix)
		}
	}
	if err := irows.Err(); err != nil {
		return nil, 0, fmt.Errorf("measuring the indexes of %s: %w", schemaName, err)
	}
	var total int64
	if err := db.QueryRowContext(ctx, `SELECT pg_database_size(current_database())`).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("measuring the database: %w", err)
	}
	return out, total, nil
}
