// Command bench regenerates baton's load-benchmark report.
//
//	cd bench && go run . [flags] [scenario...]
//
// It uses DATABASE_URL when set (the role needs CREATEDB), else a private
// PostgreSQL started from the installed binaries in a temporary directory.
// It builds the worker binary once, drives real worker processes, and
// writes bench/results/report.md, results.json (every measurement) and the
// plots. Scenarios: throughput, events, peers, coordination, failover,
// horizon, micro, profile (all by default), scale, shapes, rerate,
// latency, segtakeover and versions (only when named). -quick is a smoke run of
// about two minutes.
//
// It is a module of its own, so that the library's module does not carry
// its plotting dependencies. It runs from the repository root whichever of
// the two directories it is started in; relative paths in flags are taken
// from the directory it was started in.
//
// "go run . peer-worker ..." runs one peer worker process (the bench starts
// these itself).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "peer-worker" {
		os.Exit(peerWorkerMain(os.Args[2:]))
	}
	log.SetFlags(log.Ltime)
	log.SetPrefix("bench: ")
	cfg, err := parseConfig(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	cfg.commandLine = strings.TrimSpace("go run . " + strings.Join(os.Args[1:], " "))
	if err := toRepositoryRoot(&cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	if cfg.render {
		if err := render(cfg.out, cfg.previous); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// toRepositoryRoot makes the repository root (the directory holding
// cmd/worker, the bench's parent) the working directory. An output
// directory given on the command line stays where it was meant; the
// default is bench/results.
func toRepositoryRoot(cfg *config) error {
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	if cfg.out != "" && !filepath.IsAbs(cfg.out) {
		cfg.out = filepath.Join(wd, cfg.out)
	}
	for _, dir := range []string{wd, filepath.Dir(wd)} {
		if _, err := os.Stat(filepath.Join(dir, "cmd", "worker")); err == nil {
			if cfg.out == "" {
				cfg.out = filepath.Join(dir, "bench", "results")
			}
			return os.Chdir(dir)
		}
	}
	return fmt.Errorf("run from the bench directory or the repository root: no cmd/worker in %s or its parent", wd)
}

func run(cfg config) error {
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", cfg.out, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	began := time.Now()
	res := &results{Machine: describeMachine(), Config: configInfo{
		CommandLine: cfg.commandLine, Quick: cfg.quick, Seed: cfg.seed, Scenarios: cfg.scenarios,
	}}
	merging := false
	if cfg.merge {
		prev, err := loadResults(cfg.out)
		if err != nil {
			return fmt.Errorf("-merge: %w", err)
		}
		prev.Config.Merged = append(prev.Config.Merged, fmt.Sprintf("%s (at %s, load average %s): %s",
			cfg.commandLine, time.Now().UTC().Format(time.RFC3339), loadAvg(), strings.Join(cfg.scenarios, ", ")))
		prev.forget(cfg.scenarios)
		res, merging = prev, true
	}
	if cfg.previous != "" {
		prev, err := loadResults(cfg.previous)
		if err != nil {
			return fmt.Errorf("-previous: %w", err)
		}
		res.Previous = previousHeadline(prev)
	}
	e, err := newEnv(ctx, cfg)
	if err != nil {
		return err
	}
	defer e.close()
	if !merging {
		res.Server = serverInfo{Version: e.serverInfo, Private: !e.external, Durable: cfg.durable && !e.external,
			Settings: e.settings, PGSS: e.pgss, CommitTS: e.commitTS, CPUMeasurable: e.cpu != nil}
	}
	if err := e.buildWorker(ctx); err != nil {
		return err
	}
	res.addCommand(cfg.commandLine)
	res.addCommand("go build -o <tmp>/worker ./cmd/worker")

	steps := []struct {
		name string
		fn   func(context.Context, *results) error
	}{
		{"throughput", e.runThroughput},
		{"events", e.runEvents},
		{"peers", e.runPeers},
		{"coordination", e.runCoordination},
		{"failover", e.runFailover},
		{"horizon", e.runHorizon},
		{"micro", e.runMicro},
		{"profile", e.runProfiles},
		{"scale", e.runScale},
		{"shapes", e.runShapes},
		{"rerate", e.runRerate},
		{"latency", e.runLatency},
		{"segtakeover", e.runSegTakeover},
		{"versions", e.runVersions},
	}
	for _, s := range steps {
		if !cfg.runs(s.name) {
			continue
		}
		t0 := time.Now()
		load0 := loadAvg()
		log.Printf("=== %s", s.name)
		if err := s.fn(ctx, res); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			log.Printf("%s failed: %v", s.name, err)
			res.Errors = append(res.Errors, fmt.Sprintf("%s: %v", s.name, err))
		}
		res.Scenarios = append(res.Scenarios, scenarioRun{Name: s.name, Seconds: time.Since(t0).Seconds(), LoadBefore: load0, LoadAfter: loadAvg()})
		log.Printf("=== %s took %s", s.name, time.Since(t0).Round(time.Second))
	}
	res.WallSeconds += time.Since(began).Seconds()
	if err := res.save(cfg.out); err != nil {
		return err
	}
	if err := writePlots(res, cfg.out); err != nil {
		res.Errors = append(res.Errors, fmt.Sprintf("plots: %v", err))
	}
	if err := writeReport(res, cfg.out); err != nil {
		return err
	}
	log.Printf("wrote %s/report.md in %s", cfg.out, time.Since(began).Round(time.Second))
	if len(res.Errors) > 0 {
		return fmt.Errorf("%d scenario(s) failed: %s", len(res.Errors), strings.Join(res.Errors, "; "))
	}
	return nil
}

// loadResults reads dir/results.json, or dir itself when it is a file.
func loadResults(dir string) (*results, error) {
	path := filepath.Join(dir, "results.json")
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		path = dir
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var res results
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("reading %s/results.json: %w", dir, err)
	}
	return &res, nil
}

// render regenerates the report and plots of dir from its results.json;
// previous, if set, replaces the earlier run shown beside the headline.
func render(dir, previous string) error {
	res, err := loadResults(dir)
	if err != nil {
		return err
	}
	if previous != "" {
		prev, err := loadResults(previous)
		if err != nil {
			return fmt.Errorf("-previous: %w", err)
		}
		res.Previous = previousHeadline(prev)
	}
	if err := writePlots(res, dir); err != nil {
		return err
	}
	return writeReport(res, dir)
}
