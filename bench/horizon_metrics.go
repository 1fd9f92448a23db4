package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/uptrace/bun"
)

// histogram is one Prometheus histogram as scraped: cumulative counts by
// upper bound (le), the total count and sum.
type histogram struct {
	Bounds []float64 // ascending upper bounds, +Inf last
	Counts []float64 // cumulative counts, parallel to Bounds
	Count  float64
	Sum    float64
}

// sub returns h − prev (the observations between two scrapes); prev may be
// the zero histogram.
func (h histogram) sub(prev histogram) histogram {
	out := histogram{Bounds: h.Bounds, Counts: make([]float64, len(h.Counts)), Count: h.Count - prev.Count, Sum: h.Sum - prev.Sum}
	for i := range h.Counts {
		out.Counts[i] = h.Counts[i]
		if i < len(prev.Counts) {
			out.Counts[i] -= prev.Counts[i]
		}
	}
	return out
}

// add returns h + o (two workers' histograms of the same buckets).
func (h histogram) add(o histogram) histogram {
	if len(h.Bounds) == 0 {
		return o
	}
	if len(o.Bounds) == 0 {
		return h
	}
	out := histogram{Bounds: h.Bounds, Counts: make([]float64, len(h.Counts)), Count: h.Count + o.Count, Sum: h.Sum + o.Sum}
	for i := range h.Counts {
		out.Counts[i] = h.Counts[i]
		if i < len(o.Counts) {
			out.Counts[i] += o.Counts[i]
		}
	}
	return out
}

// quantileMs estimates quantile q in milliseconds by linear interpolation
// within the bucket that holds it (the bucket's upper bound when it is
// the last finite one); -1 without observations.
func (h histogram) quantileMs(q float64) float64 {
	if h.Count <= 0 {
		return -1
	}
	rank := q * h.Count
	lower, below := 0.0, 0.0
	for i, b := range h.Bounds {
		if h.Counts[i] >= rank {
			if math.IsInf(b, 1) {
				return lower * 1000 // beyond the last bound: its lower edge
			}
			in := h.Counts[i] - below
			if in <= 0 {
				return b * 1000
			}
			return (lower + (b-lower)*(rank-below)/in) * 1000
		}
		lower, below = b, h.Counts[i]
	}
	return lower * 1000
}

// scrape is what one read of a worker's /metrics said.
type scrape struct {
	Heartbeat histogram
	Commit    histogram
	Records   float64
	Batches   float64
}

// parseMetrics reads the metrics the horizon scenario uses from the
// Prometheus text format.
func parseMetrics(r io.Reader) (scrape, error) {
	var s scrape
	hists := map[string]*histogram{"baton_heartbeat_seconds": &s.Heartbeat, "baton_batch_commit_seconds": &s.Commit}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil {
			continue
		}
		switch name {
		case "baton_records_processed_total":
			s.Records = v
			continue
		case "baton_batches_committed_total":
			s.Batches = v
			continue
		}
		for base, h := range hists {
			switch {
			case name == base+"_count":
				h.Count = v
			case name == base+"_sum":
				h.Sum = v
			case strings.HasPrefix(name, base+`_bucket{le="`):
				le := strings.TrimSuffix(strings.TrimPrefix(name, base+`_bucket{le="`), `"}`)
				b, err := strconv.ParseFloat(le, 64)
				if err != nil {
					return s, fmt.Errorf("metric %s: bucket bound %q: %w", name, le, err)
				}
				h.Bounds = append(h.Bounds, b)
				h.Counts = append(h.Counts, v)
			}
		}
	}
	for _, h := range hists {
		idx := make([]int, len(h.Bounds))
		for i := range idx {
			idx[i] = i
		}
		sort.Slice(idx, func(a, b int) bool { return h.Bounds[idx[a]] < h.Bounds[idx[b]] })
		bs, cs := make([]float64, len(idx)), make([]float64, len(idx))
		for i, j := range idx {
			bs[i], cs[i] = h.Bounds[j], h.Counts[j]
		}
		h.Bounds, h.Counts = bs, cs
	}
	return s, sc.Err()
}

// scraper keeps the last /metrics of each worker process, read every
// interval while the process runs (a worker run with --until-done takes
// its metrics with it when it exits).
type scraper struct {
	mu   sync.Mutex
	last map[string]scrape
	stop chan struct{}
	done sync.WaitGroup
}

func newScraper() *scraper { return &scraper{last: map[string]scrape{}, stop: make(chan struct{})} }

// watch scrapes p's metrics until it exits or the scraper is closed. The
// address is the one the worker logs ("serving metrics").
func (s *scraper) watch(p *proc, interval time.Duration) {
	s.done.Add(1)
	go func() {
		defer s.done.Done()
		client := &http.Client{Timeout: 2 * time.Second}
		addr := ""
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			if addr == "" {
				addr = metricsAddr(p.logPath)
			}
			if addr != "" {
				if sc, err := scrapeOnce(client, addr); err == nil {
					s.mu.Lock()
					s.last[p.id] = sc
					s.mu.Unlock()
				}
			}
			select {
			case <-s.stop:
				return
			case <-p.done:
				return
			case <-t.C:
			}
		}
	}()
}

func (s *scraper) close() {
	close(s.stop)
	s.done.Wait()
}

// total sums the last scrapes of every worker.
func (s *scraper) total() scrape {
	s.mu.Lock()
	defer s.mu.Unlock()
	var t scrape
	ids := make([]string, 0, len(s.last))
	for id := range s.last {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		sc := s.last[id]
		t.Heartbeat = t.Heartbeat.add(sc.Heartbeat)
		t.Commit = t.Commit.add(sc.Commit)
		t.Records += sc.Records
		t.Batches += sc.Batches
	}
	return t
}

func scrapeOnce(c *http.Client, addr string) (scrape, error) {
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return scrape{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return scrape{}, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return parseMetrics(resp.Body)
}

// metricsAddr finds the address a worker serves its metrics on in its
// JSON log, "" until it has logged it.
func metricsAddr(logPath string) string {
	f, err := os.Open(logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		if !strings.Contains(sc.Text(), "serving metrics") {
			continue
		}
		var e struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Msg == "serving metrics" {
			return e.Addr
		}
	}
	return ""
}

// tableStats is one of baton's tables as pg_stat_user_tables and the
// relation sizes saw it after a run.
type tableStats struct {
	Table      string `json:"table"`
	Live       int64  `json:"n_live_tup"`
	Dead       int64  `json:"n_dead_tup"`
	Inserted   int64  `json:"n_tup_ins"`
	Updated    int64  `json:"n_tup_upd"`
	HotUpdated int64  `json:"n_tup_hot_upd"`
	HeapBytes  int64  `json:"heap_bytes"`
	IndexBytes int64  `json:"index_bytes"`
	// Vacuums counts autovacuum passes over the table (they remove
	// nothing while the horizon is pinned, and come back).
	Vacuums int64 `json:"autovacuum_count"`
}

// readTableStats reads the statistics of baton's tables in db (the
// statistics snapshot is cleared first, so the counters are current as of
// the last flush of every backend).
func readTableStats(ctx context.Context, db bun.IDB) ([]tableStats, error) {
	if _, err := db.ExecContext(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
		return nil, fmt.Errorf("clearing the statistics snapshot: %w", err)
	}
	rows, err := db.QueryContext(ctx, `
		SELECT relname, n_live_tup, n_dead_tup, n_tup_ins, n_tup_upd, n_tup_hot_upd,
		       pg_relation_size(relid), pg_indexes_size(relid), autovacuum_count
		FROM pg_stat_user_tables WHERE schemaname = 'baton'
		ORDER BY n_tup_upd + n_tup_ins DESC, relname`)
	if err != nil {
		return nil, fmt.Errorf("reading table statistics: %w", err)
	}
	defer rows.Close()
	var out []tableStats
	for rows.Next() {
		var t tableStats
		if err := rows.Scan(&t.Table, &t.Live, &t.Dead, &t.Inserted, &t.Updated, &t.HotUpdated, &t.HeapBytes, &t.IndexBytes, &t.Vacuums); err != nil {
			return nil, fmt.Errorf("reading table statistics: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

func findTable(ts []tableStats, name string) tableStats {
	for _, t := range ts {
		if t.Table == name {
			return t
		}
	}
	return tableStats{Table: name}
}

// hotShare is the share of t's updates that were heap-only, or -1.
func (t tableStats) hotShare() float64 {
	if t.Updated == 0 {
		return -1
	}
	return float64(t.HotUpdated) / float64(t.Updated)
}

// stmtRaw is one statement as pg_stat_statements saw it over a run,
// unclassified: the pin's cost shows as buffers touched per call
// (shared_blks_hit + shared_blks_read), which the machine's load does not
// change, as well as time.
type stmtRaw struct {
	Query   string  `json:"query"` // the first characters, on one line
	Calls   int64   `json:"calls"`
	TotalMs float64 `json:"total_ms"`
	Rows    int64   `json:"rows"`
	Blocks  int64   `json:"blocks"` // shared buffers hit or read
}

// BlocksPerCall is the buffers a call touched on average.
func (s stmtRaw) BlocksPerCall() float64 {
	if s.Calls == 0 {
		return 0
	}
	return float64(s.Blocks) / float64(s.Calls)
}

// rawStatements reads the n statements of database dbname that took the
// most time, with their buffer counts.
func (e *env) rawStatements(ctx context.Context, dbname string, n int) ([]stmtRaw, error) {
	if !e.pgss {
		return nil, errNoPGSS
	}
	rows, err := e.admin.QueryContext(ctx, `
		SELECT s.query, s.calls, s.total_exec_time, s.rows, s.shared_blks_hit + s.shared_blks_read
		FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
		WHERE d.datname = $1
		ORDER BY s.total_exec_time DESC
		LIMIT $2`, dbname, n)
	if err != nil {
		return nil, fmt.Errorf("reading pg_stat_statements: %w", err)
	}
	defer rows.Close()
	var out []stmtRaw
	for rows.Next() {
		var s stmtRaw
		var q string
		if err := rows.Scan(&q, &s.Calls, &s.TotalMs, &s.Rows, &s.Blocks); err != nil {
			return nil, fmt.Errorf("reading pg_stat_statements: %w", err)
		}
		s.Query = oneLine(stripComments(q), 160)
		out = append(out, s)
	}
	return out, rows.Err()
}

// stripComments drops SQL line comments, so that a statement's first
// characters say what it does.
func stripComments(q string) string {
	lines := strings.Split(q, "\n")
	out := lines[:0]
	for _, l := range lines {
		if i := strings.Index(l, "--"); i >= 0 {
			l = l[:i]
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}
