package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/batonhq/baton/internal/pglocal"
)

// The versions scenario: the same measurements on every supported
// PostgreSQL major, back to back. For each major installed (15 is
// Debian's, 16–18 scripts/install-pg.sh's) it starts a private server of
// that version with the bench's settings, measures the COPY set-up cost
// per transaction (copysetup.go), runs the shapes table (shapes.go) at
// -versions-shapes-records and the failover scenario's crash series at
// the fast timing (failover.go: SIGKILL of a busy worker, then the time to
// the first batch another worker commits on one of its contracts), and
// stops the server. The report puts the versions side by side, each
// figure also as a ratio to 15's from the same run.

// versionsBaseline is the major every figure is compared with.
const versionsBaseline = 15

// versionsConfig holds the versions scenario's knobs.
type versionsConfig struct {
	// majors are the PostgreSQL majors to measure, in order (default 15,
	// 16, 17, 18; a major not installed is reported as such).
	majors intList
	// shapesRecords is the size of every shape (default 200,000; -quick
	// 20,000): six shapes on four majors must fit in about 20 minutes.
	shapesRecords intFlag
	// kills is the SIGKILLs of the takeover series (default 10; -quick 3).
	kills intFlag
}

func (c *versionsConfig) flags(fs *flag.FlagSet) {
	c.majors = intList{15, 16, 17, 18}
	c.shapesRecords.v, c.kills.v = 200_000, 10
	fs.Var(&c.majors, "versions", "versions: PostgreSQL majors to measure, each on a private server of its own (one not installed is skipped and reported)")
	fs.Var(&c.shapesRecords, "versions-shapes-records", "versions: records of every shape of the shapes table (default 200000; -quick 20000)")
	fs.Var(&c.kills, "versions-kills", "versions: SIGKILLs of a busy worker at the fast timing, for the takeover figures (default 10; -quick 3)")
}

func (c *versionsConfig) applyQuick() {
	if !c.shapesRecords.set {
		c.shapesRecords.v = 20_000
	}
	if !c.kills.set {
		c.kills.v = 3
	}
}

// validate checks the majors: the versions the bench knows how to find.
func (c versionsConfig) validate() error {
	seen := map[int]bool{}
	for _, m := range c.majors {
		if m < 10 {
			return fmt.Errorf("-versions %d: want PostgreSQL majors such as 17", m)
		}
		if seen[m] {
			return fmt.Errorf("-versions: %d named twice", m)
		}
		seen[m] = true
	}
	return nil
}

// versionRun is one major's measurements.
type versionRun struct {
	Major int `json:"major"`
	// Missing says why the major was not measured (not installed).
	Missing string `json:"missing,omitempty"`
	BinDir  string `json:"bindir,omitempty"`
	// Server is the server's version().
	Server        string `json:"server,omitempty"`
	PGSS          bool   `json:"pg_stat_statements"`
	CommitTS      bool   `json:"track_commit_timestamp"`
	CPUMeasurable bool   `json:"db_cpu_measurable"`
	// Copy is the COPY set-up micro-benchmark, Shapes the shapes table,
	// Takeover the crash series at the fast timing.
	Copy       *copySetup      `json:"copy_setup,omitempty"`
	Shapes     *shapesResult   `json:"shapes,omitempty"`
	Takeover   *failoverSeries `json:"takeover,omitempty"`
	Seconds    float64         `json:"seconds"`
	LoadBefore string          `json:"loadavg_before"`
	LoadAfter  string          `json:"loadavg_after"`
	Errors     []string        `json:"errors,omitempty"`
}

// versionsResult is the scenario's measurements, one run per major asked
// for, in order.
type versionsResult struct {
	ShapesRecords int `json:"shapes_records"`
	// Kills, Workers and Batch are the takeover series' SIGKILLs, worker
	// processes and --batch-size.
	Kills   int          `json:"kills"`
	Workers int          `json:"workers"`
	Batch   int          `json:"batch_size"`
	Runs    []versionRun `json:"runs"`
}

// baseline is the run of versionsBaseline, if it was measured.
func (r *versionsResult) baseline() (versionRun, bool) {
	for _, v := range r.Runs {
		if v.Major == versionsBaseline && v.Missing == "" {
			return v, true
		}
	}
	return versionRun{}, false
}

func (e *env) runVersions(ctx context.Context, res *results) error {
	c := e.cfg.versions
	r := &versionsResult{ShapesRecords: c.shapesRecords.v, Kills: c.kills.v, Workers: e.cfg.foWorkers, Batch: e.cfg.foBatch}
	res.Versions = r
	failed := 0
	for _, major := range c.majors {
		run := versionRun{Major: major}
		bindir, err := majorBinDir(major)
		if err != nil {
			log.Printf("versions: PostgreSQL %d: %v", major, err)
			run.Missing = err.Error()
			r.Runs = append(r.Runs, run)
			continue
		}
		run.BinDir = bindir
		t0, load0 := time.Now(), loadAvg()
		log.Printf("versions: === PostgreSQL %d (%s), load average %s", major, bindir, load0)
		err = e.measureVersion(ctx, &run, res)
		run.Seconds, run.LoadBefore, run.LoadAfter = time.Since(t0).Seconds(), load0, loadAvg()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			run.Errors = append(run.Errors, err.Error())
		}
		if len(run.Errors) > 0 {
			failed++
		}
		r.Runs = append(r.Runs, run)
		log.Printf("versions: PostgreSQL %d took %s", major, time.Since(t0).Round(time.Second))
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d majors had failures", failed, len(c.majors))
	}
	return nil
}

// measureVersion starts a private server from run.BinDir and measures it:
// the COPY set-up cost, the shapes table, the takeover series. A failed
// measurement is recorded in run.Errors and the next one still runs.
func (e *env) measureVersion(ctx context.Context, run *versionRun, res *results) error {
	cfg := e.cfg
	cfg.shapes.records = intFlag{v: cfg.versions.shapesRecords.v, set: true}
	cfg.shapes.large, cfg.shapes.only = false, ""
	v, err := openEnv(ctx, cfg, "", run.BinDir)
	if err != nil {
		return fmt.Errorf("starting PostgreSQL %d: %w", run.Major, err)
	}
	defer v.close()
	v.workerBin, v.selfBin = e.workerBin, e.selfBin
	run.Server, run.PGSS, run.CommitTS, run.CPUMeasurable = v.serverInfo, v.pgss, v.commitTS, v.cpu != nil
	if v.server.Major() != run.Major {
		return fmt.Errorf("asked for PostgreSQL %d, started %d", run.Major, v.server.Major())
	}
	note := func(what string, err error) {
		if err != nil && ctx.Err() == nil {
			log.Printf("versions: PostgreSQL %d: %s: %v", run.Major, what, err)
			run.Errors = append(run.Errors, what+": "+err.Error())
		}
	}

	cp, err := v.measureCopySetup(ctx)
	run.Copy = cp
	note("COPY set-up", err)

	sub := &results{}
	note("shapes", v.runShapes(ctx, sub))
	run.Shapes = sub.Shapes
	for _, c := range sub.Commands {
		res.addCommand(c)
	}

	ds, err := v.seedTemplate(ctx, "failover", cfg.foContracts, cfg.failoverRecordsPerContract())
	if err != nil {
		note("takeover", err)
		return ctx.Err()
	}
	s, err := v.failoverSeries(ctx, ds, timingFast, syscall.SIGKILL, cfg.versions.kills.v)
	run.Takeover = &s
	note("takeover", err)
	res.addCommand(s.Command)
	return ctx.Err()
}

// majorBinDir finds the installed binaries of a major as the tests do
// with BATON_PG_VERSION set to it (pglocal.BinDir): $BATON_PG_HOME/<major>
// (scripts/install-pg.sh), then the distribution's folders; it fails when
// that major is not installed.
func majorBinDir(major int) (string, error) {
	prev, had := os.LookupEnv(pglocal.EnvVersion)
	if err := os.Setenv(pglocal.EnvVersion, strconv.Itoa(major)); err != nil {
		return "", err
	}
	defer func() {
		if had {
			os.Setenv(pglocal.EnvVersion, prev)
		} else {
			os.Unsetenv(pglocal.EnvVersion)
		}
	}()
	return pglocal.BinDir()
}
