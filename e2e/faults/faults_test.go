package faults

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/pglocal"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/pricing/seed"
)

// Scenario sizes: short for every CI run, larger with -long.
func size() (contracts, perContract int) {
	if isLong() {
		return 40, 3000
	}
	return 12, 1500
}

// SIGKILL of a worker mid-batch, several times, at random moments; each
// killed worker is replaced.
func TestSIGKILLAtRandomMoments(t *testing.T) {
	for i := range schedules() {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			r := newRun(t, scenarioSeed(t))
			r.seedData(size())
			for range 3 {
				r.start(r.dsn)
			}
			kills := 3
			if isLong() {
				kills = 8
			}
			var orphans []orphan
			for k := 0; k < kills; k++ {
				r.waitProgress(float64(k+1) / float64(kills+2) * (0.6 + 0.3*r.rng.Float64()))
				w := r.victim()
				held := r.heldBy(w.name)
				at := r.dbNow()
				if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				w.killed = true
				r.stats.fault("sigkill")
				orphans = append(orphans, orphan{worker: w.name, at: at, contracts: held})
				r.start(r.dsn)
			}
			r.waitAll(3 * time.Minute)
			r.check()
			r.takeovers(orphans)
		})
	}
}

// SIGSTOP for longer than the lease, then SIGCONT: the paused worker's
// partitions are taken over, its late writes are fenced off, and it carries
// on normally and exits 0.
func TestSIGSTOPPastLeaseThenSIGCONT(t *testing.T) {
	for i := range schedules() {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			r := newRun(t, scenarioSeed(t))
			r.seedData(size())
			// At debug: a worker resumed after a pause may take its
			// expired leases and timed-out heartbeats for a database
			// outage, and then logs each lost partition at debug under one
			// "database unreachable" warning.
			for range 3 {
				r.start(r.dsn, "--log-level", "debug")
			}
			r.waitProgress(0.2 + 0.2*r.rng.Float64())
			w := r.victim()
			held := r.heldBy(w.name)
			at := r.dbNow()
			if err := w.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			w.stopped = true
			r.stats.fault("sigstop")
			pause := 2*time.Second + time.Duration(r.rng.Int64N(int64(2*time.Second)))
			time.Sleep(pause) // the fault itself: a pause longer than the 1s lease
			if err := w.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			w.stopped = false
			r.waitAll(3 * time.Minute)
			r.check()
			r.takeovers([]orphan{{worker: w.name, at: at, contracts: held}})
			logs := w.logs()
			if !strings.Contains(logs, `"event":"lost"`) && !strings.Contains(logs, `"event":"fenced"`) {
				t.Errorf("the paused worker %s logged no lost or fenced partition after a %s pause", w.name, pause)
			}
		})
	}
}

// PostgreSQL restarts (fast and immediate) while workers run: workers ride
// out the outage and finish; nothing is lost or repeated.
func TestDatabaseRestart(t *testing.T) {
	srv := pgtest.Server(t)
	for _, mode := range []pglocal.Mode{pglocal.Fast, pglocal.Immediate} {
		name := map[pglocal.Mode]string{pglocal.Fast: "fast", pglocal.Immediate: "immediate"}[mode]
		t.Run(name, func(t *testing.T) {
			r := newRun(t, scenarioSeed(t))
			r.seedData(size())
			for range 3 {
				r.start(r.dsn)
			}
			r.waitProgress(0.2 + 0.3*r.rng.Float64())
			srv.Stop(mode)
			r.stats.fault("db_restart_" + name)
			time.Sleep(time.Duration(200+r.rng.IntN(1500)) * time.Millisecond) // the outage
			if err := srv.Restart(t.Context()); err != nil {
				t.Fatal(err)
			}
			// The test's own idle connections died with the server; one
			// used again within a second of its last use is not pinged
			// first and would fail the checks with 57P01. Drop them.
			r.db.SetMaxIdleConns(0)
			r.db.SetMaxIdleConns(2)
			r.waitAll(3 * time.Minute)
			r.check()
		})
	}
}

// A second load while workers run: new records for contracts in progress
// and for caught-up ones, with re-deliveries of records already loaded.
func TestLoadWhileRunning(t *testing.T) {
	for i := range schedules() {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			r := newRun(t, scenarioSeed(t))
			contracts, per := size()
			o := seed.Options{Contracts: contracts, RecordsPerContract: per, Seed: r.rng.Uint64(), Prefix: "f"}
			r.tiers = filepath.Join(r.dir, "tiers.csv")
			first := filepath.Join(r.dir, "records-1.csv")
			write(t, r.tiers, func(w io.Writer) error { return seed.WriteTiers(w, o) })
			// The first load: every contract's first records, and the whole
			// of contract 0, which will be caught up when the second load
			// arrives.
			write(t, first, func(w io.Writer) error {
				return writeRecordRange(w, o, func(c, j int) bool { return c == 0 || j < per/3 })
			})
			r.load(first, r.tiers)
			// Long-running workers (not until-done): they must pick up
			// work that arrives after they caught up.
			var ws []*proc
			for range 3 {
				ws = append(ws, r.launch(r.dsn, "--mode", "lock"))
			}
			r.waitProgress(0.3)
			// The second load re-delivers part of the first and adds the rest.
			second := filepath.Join(r.dir, "records-2.csv")
			write(t, second, func(w io.Writer) error {
				return writeRecordRange(w, o, func(c, j int) bool { return c != 0 && j >= per/4 })
			})
			rep := r.load(second, "")
			r.stats.fault("concurrent_load")
			if rep.RecordsRedelivered == 0 {
				t.Fatal("the second load re-delivered nothing; the scenario is mis-built")
			}
			// Records for the caught-up contract arrive after its release.
			r.waitProgress(0.9)
			third := filepath.Join(r.dir, "records-3.csv")
			write(t, third, func(w io.Writer) error {
				return writeRecordRange(w, seed.Options{Contracts: 1, RecordsPerContract: 50, Seed: o.Seed + 1, Prefix: "f"},
					func(c, j int) bool { return true }, "late")
			})
			r.load(third, "")
			r.waitProgress(1)
			for _, w := range ws {
				if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
			}
			r.waitAll(time.Minute)
			r.check()
		})
	}
}

// Every worker stopped gracefully at once mid-run, then restarted: nothing
// lost, nothing repeated, and the restarted workers need no lease expiry.
func TestGracefulStopAllThenRestart(t *testing.T) {
	for i := range schedules() {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			r := newRun(t, scenarioSeed(t))
			r.seedData(size())
			var first []*proc
			for range 3 {
				first = append(first, r.start(r.dsn, "--stale-after", "30s"))
			}
			r.waitProgress(0.2 + 0.4*r.rng.Float64())
			for _, w := range first {
				if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
			}
			r.stats.fault("sigterm_all")
			for _, w := range first {
				<-w.done
				if w.err != nil {
					t.Fatalf("%s exited with %v after SIGTERM", w.name, w.err)
				}
			}
			var owned int
			if err := r.db.QueryRow(`SELECT count(*) FROM baton.tasks WHERE owner IS NOT NULL`).Scan(&owned); err != nil {
				t.Fatal(err)
			}
			if owned != 0 {
				t.Fatalf("%d contracts still owned after every worker stopped gracefully", owned)
			}
			for range 3 {
				r.start(r.dsn, "--stale-after", "30s")
			}
			r.waitAll(3 * time.Minute)
			r.check()
		})
	}
}

// writeRecordRange writes the records of o for which keep(contract, j) holds,
// in the generator's order, optionally renaming record ids with a prefix so
// they are new records.
func writeRecordRange(w io.Writer, o seed.Options, keep func(c, j int) bool, idPrefix ...string) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(seed.WriteRecords(pw, o, nil)) }()
	var lines []string
	buf, err := io.ReadAll(pr)
	if err != nil {
		return err
	}
	lines = strings.Split(strings.TrimRight(string(buf), "\n"), "\n")
	if _, err := io.WriteString(w, lines[0]+"\n"); err != nil {
		return err
	}
	for i, line := range lines[1:] {
		c, j := i%o.Contracts, i/o.Contracts
		if !keep(c, j) {
			continue
		}
		if len(idPrefix) > 0 {
			f := strings.SplitN(line, ",", 3)
			line = f[0] + "," + idPrefix[0] + f[1] + "," + f[2]
		}
		if _, err := io.WriteString(w, line+"\n"); err != nil {
			return err
		}
	}
	return nil
}
