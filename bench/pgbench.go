package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/batonhq/baton/internal/pglocal"
)

// commitRate is the server's single-row commit rate: pgbench updating one
// random row per transaction from Clients connections, measured in the same
// run as the one-record contracts it is compared with.
type commitRate struct {
	Clients int     `json:"clients"`
	Seconds float64 `json:"seconds"`
	TPS     float64 `json:"tps"`
	Script  string  `json:"script"`
}

const pgbenchScript = `\set id random(1, 100000 * :scale)
UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :id;
`

var tpsLine = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)

// pgbenchCommits runs pgbench's single-row UPDATE from clients connections
// for d in a fresh database.
func (e *env) pgbenchCommits(ctx context.Context, clients int, d time.Duration) (*commitRate, error) {
	bindir, err := pglocal.BinDir()
	if err != nil {
		return nil, err
	}
	name := "bench_pgbench_" + randomSuffix()
	if err := e.createDB(ctx, name, ""); err != nil {
		return nil, err
	}
	defer e.dropDB(ctx, name)
	pgbench := filepath.Join(bindir, "pgbench")
	if out, err := exec.CommandContext(ctx, pgbench, "-i", "-q", "-s", "1", e.url(name)).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pgbench -i: %w: %s", err, out)
	}
	script := filepath.Join(e.tmp, "pgbench_update.sql")
	if err := os.WriteFile(script, []byte(pgbenchScript), 0o644); err != nil {
		return nil, err
	}
	e.checkpoint(ctx)
	secs := max(1, int(d/time.Second))
	out, err := exec.CommandContext(ctx, pgbench, "-n", "-c", strconv.Itoa(clients), "-j", strconv.Itoa(clients),
		"-T", strconv.Itoa(secs), "-f", script, e.url(name)).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("pgbench: %w: %s", err, out)
	}
	m := tpsLine.FindSubmatch(out)
	if m == nil {
		return nil, fmt.Errorf("pgbench: no tps line in %q", out)
	}
	tps, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		return nil, err
	}
	log.Printf("pgbench single-row UPDATE, %d clients: %.0f commits/s", clients, tps)
	return &commitRate{Clients: clients, Seconds: float64(secs), TPS: tps, Script: pgbenchScript}, nil
}
