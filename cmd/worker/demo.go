package main

import (
	"context"
	"database/sql"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing/ingest"
	"github.com/batonhq/baton/pricing/pricer"
	"github.com/batonhq/baton/pricing/seed"
	"github.com/batonhq/baton/schema"
)

type demoOptions struct {
	contracts, records, workers int
	killAt                      float64
	pgDir                       string
	fresh                       bool
	seed                        uint64
}

func newDemoCmd(g *globals) *cobra.Command {
	var o demoOptions
	cmd := &cobra.Command{
		Use: "demo",
		Example: `  worker demo
  worker demo --contracts 20 --records-per-contract 500 --kill-at 0.5
  DATABASE_URL=postgres://baton@db.example/postgres worker demo`,
		Short: "Show baton end to end: seed, three workers, one killed mid-run, takeover, exact verification",
		Long: `demo seeds synthetic contracts, starts worker processes, SIGKILLs one part-way
through, shows the takeover as it happens, and verifies every contract's
per-record nets against an independent recomputation.

Never touches the database named by DATABASE_URL (or --database-url):
with it set, the demo creates a database of its own on the same server
(the role needs CREATEDB), loads, prices and verifies there, and drops it
at the end, also when interrupted (SIGINT, SIGTERM). The jobs, records and
workers of the named database are left alone.

With DATABASE_URL unset it runs a private PostgreSQL from the locally
installed binaries, in --pg-dir (reused by later runs; --fresh starts over),
listening on 127.0.0.1 on a free port, stopped when the demo ends.

Writes files: the generated data and the workers' logs, in a temporary
directory removed at the end; without DATABASE_URL, the private server's
data in --pg-dir.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return interrupted(cmd.Context(), "demo", runDemo(cmd.Context(), g, o))
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.contracts, "contracts", 60, "contracts to seed")
	f.IntVar(&o.records, "records-per-contract", 2000, "records per contract")
	f.IntVar(&o.workers, "workers", 3, "worker processes")
	f.Float64Var(&o.killAt, "kill-at", 0.3, "fraction priced at which one worker is SIGKILLed, below 1 (0: no kill)")
	f.StringVar(&o.pgDir, "pg-dir", defaultPGDir(), "data directory of the private PostgreSQL (without DATABASE_URL)")
	f.BoolVar(&o.fresh, "fresh", false, "delete --pg-dir first")
	f.Uint64Var(&o.seed, "seed", 1, "seed for the synthetic data, any value")
	positive(f, "contracts", "records-per-contract", "workers")
	nonNegative(f, "kill-at")
	anyValue(f, "seed")
	return cmd
}

func runDemo(ctx context.Context, g *globals, o demoOptions) error {
	if o.killAt >= 1 {
		return usageError("--kill-at must be below 1 (a fraction of the records priced), got %g", o.killAt)
	}
	out := g.stdout
	began := time.Now()
	env, err := startDemo(ctx, g, demoPlace{name: "baton_demo", pgDir: o.pgDir, fresh: o.fresh}, "baton-demo-")
	if err != nil {
		return err
	}
	defer env.close()
	db, dir := env.db, env.dir
	so := seed.Options{Contracts: o.contracts, RecordsPerContract: o.records, Seed: o.seed, Prefix: "demo"}
	tiers, records, err := writeSeed(dir, so, nil)
	if err != nil {
		return err
	}
	rep, err := ingest.NewStore(db, g.schema).Load(ctx, ingest.Options{TiersPath: tiers, RecordsPath: records})
	if err != nil {
		return err
	}
	total := rep.RecordsAccepted
	var pending int64
	if err := db.QueryRowContext(ctx, g.sql(`SELECT coalesce(sum(available - position), 0) FROM {{.Schema}}.tasks`)).Scan(&pending); err != nil {
		return err
	}
	fmt.Fprintf(out, "loaded %d records for %d contracts in %s%s; %d records to price\n",
		rep.RecordsAccepted, o.contracts, rep.Duration.Round(time.Millisecond),
		loadRate(rep.RecordsAccepted, rep.Duration), pending)

	// Room for the whole fair share, so survivors can take a dead worker's
	// contracts at once rather than when a slot frees up.
	maxParts := fmt.Sprint(o.contracts)
	timing := []string{"--heartbeat", "200ms", "--stale-after", "1s", "--confirm", "3", "--batch-size", "500", "--max-partitions", maxParts}
	fmt.Fprintf(out, "starting %d workers (%s)\n", o.workers, strings.Join(timing, " "))
	priceStart := time.Now()
	var procs []*exec.Cmd
	exited := make(chan workerExit, o.workers)
	for i := 1; i <= o.workers; i++ {
		c, err := env.startWorker(ctx, fmt.Sprintf("demo-%d", i), append([]string{"--until-done"}, timing...)...)
		if err != nil {
			return err
		}
		procs = append(procs, c)
		go func(i int, c *exec.Cmd) { exited <- workerExit{i, c.Wait()} }(i, c)
	}
	defer func() {
		for _, c := range procs {
			_ = c.Process.Kill()
		}
	}()

	store := pricingStore(db, g.schema)
	live := newLiveView(out)
	killed := 0
	var victimID string           // the killed worker's instance id (name#suffix)
	var orphaned map[string]int64 // contracts the killed worker held → position at the kill
	var tk takeovers              // what the history says of their takeovers
	running := o.workers
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for running > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case x := <-exited:
			running--
			if x.i == killed {
				continue
			}
			if x.err != nil {
				return fmt.Errorf("worker demo-%d failed: %v (log in %s)", x.i, x.err, env.logPath(fmt.Sprintf("demo-%d", x.i)))
			}
			continue
		case <-tick.C:
		}
		parts, workers, err := store.Status(ctx)
		if err != nil {
			continue // the database may be busy; try again next tick
		}
		s := buildStatus(parts, workers)
		live.draw(s, total, time.Since(priceStart))
		if killed == 0 && o.killAt > 0 && o.workers > 1 && float64(s.Totals.Processed) >= o.killAt*float64(total) {
			victim, held := pickVictim(s)
			if victim > 0 {
				_ = procs[victim-1].Process.Signal(syscall.SIGKILL)
				killed = victim
				for _, w := range s.Workers {
					if w.Name == fmt.Sprintf("demo-%d", victim) {
						victimID = w.ID
					}
				}
				orphaned = map[string]int64{}
				for _, p := range s.Partitions {
					if p.Owner != nil && *p.Owner == fmt.Sprintf("demo-%d", victim) {
						orphaned[p.ContractID] = p.Processed
					}
				}
				live.note(fmt.Sprintf("SIGKILL demo-%d (pid %d) at %d%% priced, holding %d contracts: %s",
					victim, procs[victim-1].Process.Pid, 100*s.Totals.Processed/total, held, keysOf(orphaned)))
			}
		}
		if killed > 0 && !tk.complete {
			// Takeover times come from the history, all by the database
			// clock: from the dead owner's last heartbeat that renewed the
			// lease to the new owner's first committed batch. (The moment
			// of the kill says nothing of when the lease started to run
			// out: that was the renewal before it.)
			was := tk
			if err := tk.read(ctx, db, g.schema, victimID); err != nil {
				continue // the database may be busy; try again next tick
			}
			if tk.resumed > 0 && was.resumed == 0 {
				live.note(fmt.Sprintf("takeover: %s took over %s from demo-%d: its first batch %s after demo-%d's last heartbeat (the lease is 1s; bound: stale-after 1s + poll 0.2s + 3 × 200ms heartbeats + a batch)",
					nameOf(tk.firstBy), partition.PartitionOf(tk.firstKey), killed, tk.min.Round(10*time.Millisecond), killed))
			}
			if tk.complete && tk.taken > 0 {
				live.note(fmt.Sprintf("all %d contracts taken over from demo-%d have their first batch: takeover times %s to %s",
					tk.taken, killed, tk.min.Round(10*time.Millisecond), tk.max.Round(10*time.Millisecond)))
			}
		}
	}
	elapsed := time.Since(priceStart)
	live.finish()
	if killed > 0 {
		// The workers are done: every takeover has its first batch.
		if err := tk.read(ctx, db, g.schema, victimID); err != nil {
			return err
		}
	}

	return demoSummary(ctx, g, db, o, total, elapsed, killed, tk, time.Since(began))
}

// takeovers are the takeovers of the contracts a killed worker held, as the
// events table records them.
type takeovers struct {
	taken    int           // contracts taken over from the worker
	resumed  int           // of those, with a first batch by the new owner
	held     int           // contracts with work the dead worker still owns
	min, max time.Duration // takeover times of the resumed ones
	firstKey string        // the first contract resumed, and by whom
	firstBy  string
	complete bool // nothing is left to take over or to resume
}

// read reads the takeovers from owner (an instance id). A takeover's time
// is its first batch's takeover_ms: from the previous owner's last
// heartbeat that renewed the lease (the takeover's prev_heartbeat_at) to
// the first batch's commit, by the database clock, the time the console
// shows too.
func (t *takeovers) read(ctx context.Context, db *dbconn.DB, schemaName, owner string) error {
	var minMS, maxMS int64
	var firstKey, firstBy sql.NullString
	err := db.QueryRowContext(ctx, schema.SQL(schemaName, `
		SELECT count(*), count(f.takeover_ms), coalesce(min(f.takeover_ms), 0), coalesce(max(f.takeover_ms), 0),
		       (array_agg(f.partition_key ORDER BY f.event_id) FILTER (WHERE f.takeover_ms IS NOT NULL))[1],
		       (array_agg(f.worker ORDER BY f.event_id) FILTER (WHERE f.takeover_ms IS NOT NULL))[1],
		       (SELECT count(*) FROM {{.Schema}}.tasks WHERE owner = ? AND available > position)
		FROM {{.Schema}}.events k
		LEFT JOIN {{.Schema}}.events f ON f.task_kind = k.task_kind AND f.partition_key = k.partition_key
		     AND f.version = k.version AND f.kind = ?
		WHERE k.kind = ? AND k.prev_owner = ?`), owner, partition.EventFirstBatch, partition.EventTakeover, owner).
		Scan(&t.taken, &t.resumed, &minMS, &maxMS, &firstKey, &firstBy, &t.held)
	if err != nil {
		return fmt.Errorf("reading the takeovers from %s: %w", owner, err)
	}
	t.min, t.max = time.Duration(minMS)*time.Millisecond, time.Duration(maxMS)*time.Millisecond
	t.firstKey, t.firstBy = firstKey.String, firstBy.String
	t.complete = t.held == 0 && t.resumed == t.taken
	return nil
}

// nameOf is a worker's name without its per-process suffix.
func nameOf(instance string) string {
	name, _, _ := strings.Cut(instance, partition.InstanceSeparator)
	return name
}

type workerExit struct {
	i   int
	err error
}

// pickVictim chooses the live demo worker holding the most contracts.
func pickVictim(s statusJSON) (int, int) {
	best, held := 0, 0
	for _, w := range s.Workers {
		var i int
		if _, err := fmt.Sscanf(w.Name, "demo-%d", &i); err == nil && w.Held > held {
			best, held = i, w.Held
		}
	}
	return best, held
}

func keysOf(m map[string]int64) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	if len(ks) > 6 {
		return strings.Join(ks[:6], ", ") + fmt.Sprintf(" and %d more", len(ks)-6)
	}
	return strings.Join(ks, ", ")
}

func demoSummary(ctx context.Context, g *globals, db *dbconn.DB, o demoOptions, total int64, elapsed time.Duration,
	killed int, tk takeovers, wall time.Duration) error {
	out := g.stdout
	sum, err := pricer.NewStore(db, g.schema).Verify(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "summary")
	fmt.Fprintf(out, "  contracts           %d\n", sum.Contracts)
	// priced's primary key (contract_id, seq) forbids pricing a record twice.
	fmt.Fprintf(out, "  records             %d accepted, %d priced\n", sum.Records, sum.Priced)
	fmt.Fprintf(out, "  gross / net         %s / %s minor units\n", sum.Gross, sum.Net)
	fmt.Fprintf(out, "  pricing time        %s (%.0f records/s with %d workers)\n", elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(), o.workers)
	switch {
	case killed > 0 && tk.resumed > 0:
		fmt.Fprintf(out, "  crash               demo-%d SIGKILLed; %d of its contracts taken over, first batch by another worker\n", killed, tk.taken)
		fmt.Fprintf(out, "                      %s to %s after demo-%d's last heartbeat that renewed the lease (takeover time)\n",
			tk.min.Round(10*time.Millisecond), tk.max.Round(10*time.Millisecond), killed)
	case killed > 0:
		fmt.Fprintf(out, "  crash               demo-%d SIGKILLed; none of its contracts needed a takeover (it had released them)\n", killed)
	}
	fmt.Fprintf(out, "  demo wall time      %s\n", wall.Round(time.Millisecond))
	if len(sum.Mismatches) > 0 || sum.Priced != sum.Records {
		for _, m := range sum.Mismatches {
			fmt.Fprintln(out, "  MISMATCH", m.Description)
		}
		return fmt.Errorf("verification failed: %d contracts disagree with the independent recomputation", len(sum.Mismatches))
	}
	fmt.Fprintf(out, "  verification        OK: for all %d contracts the per-record nets add up to the contract net\n", sum.Contracts)
	fmt.Fprintln(out, "                      recomputed independently in SQL, and every record was priced exactly once")
	return nil
}
