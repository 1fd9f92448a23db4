package demo

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing/ingest"
	"github.com/batonhq/baton/pricing/pricer"
	"github.com/batonhq/baton/pricing/seed"
)

// View shows the pricing demo's progress as it goes: the worker binary's
// live status view.
type View interface {
	// Draw shows a status snapshot: total records to price, elapsed
	// since pricing began.
	Draw(parts []partition.PartitionStatus, workers []partition.WorkerStatus, total int64, elapsed time.Duration)
	// Note shows a line about what just happened (a kill, a takeover).
	Note(line string)
}

// PricingOptions are "worker demo"'s.
type PricingOptions struct {
	Config
	Contracts, RecordsPerContract, Workers int
	// KillAt is the fraction of the records priced at which the worker
	// holding the most contracts is SIGKILLed, below 1 (0: no kill).
	KillAt float64
	// Seed seeds the synthetic data.
	Seed uint64
	// View shows the progress.
	View View
}

// Pricing is "worker demo": it seeds synthetic contracts, starts worker
// processes, SIGKILLs one part-way (KillAt), shows the takeover as it
// happens, and verifies every contract's per-record nets against an
// independent recomputation, failing if they disagree.
func Pricing(ctx context.Context, o PricingOptions) error {
	return interrupted(ctx, "demo", runPricing(ctx, o))
}

func runPricing(ctx context.Context, o PricingOptions) error {
	if o.KillAt >= 1 {
		return usageError("--kill-at must be below 1 (a fraction of the records priced), got %g", o.KillAt)
	}
	o.Config = o.withDefaults()
	out := o.Stdout
	began := time.Now()
	env, err := start(ctx, o.Config, "baton_demo", "baton-demo-")
	if err != nil {
		return err
	}
	defer env.close()
	db, schemaName := env.db, o.Schema.Schema
	so := seed.Options{Contracts: o.Contracts, RecordsPerContract: o.RecordsPerContract, Seed: o.Seed, Prefix: "demo"}
	tiers, records, err := seed.WriteFiles(env.dir, so, nil)
	if err != nil {
		return err
	}
	rep, err := ingest.NewStore(db, schemaName).Load(ctx, ingest.Options{TiersPath: tiers, RecordsPath: records})
	if err != nil {
		return err
	}
	total := rep.RecordsAccepted
	store := partition.NewStore(db, schemaName).Kind(pricer.Kind)
	parts, _, err := store.Status(ctx)
	if err != nil {
		return err
	}
	var pending int64
	for _, p := range parts {
		pending += p.Pending
	}
	rate := ""
	if r, ok := rep.Rate(); ok {
		rate = fmt.Sprintf(" (%.0f records/s)", r)
	}
	fmt.Fprintf(out, "loaded %d records for %d contracts in %s%s; %d records to price\n",
		rep.RecordsAccepted, o.Contracts, rep.Duration.Round(time.Millisecond), rate, pending)

	// Room for the whole fair share, so survivors can take a dead worker's
	// contracts at once rather than when a slot frees up.
	maxParts := fmt.Sprint(o.Contracts)
	timing := []string{"--heartbeat", "200ms", "--stale-after", "1s", "--confirm", "3", "--batch-size", "500", "--max-partitions", maxParts}
	fmt.Fprintf(out, "starting %d workers (%s)\n", o.Workers, strings.Join(timing, " "))
	priceStart := time.Now()
	var procs []*exec.Cmd
	exited := make(chan workerExit, o.Workers)
	for i := 1; i <= o.Workers; i++ {
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

	k := kill{view: o.View}
	running := o.Workers
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for running > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case x := <-exited:
			running--
			if x.i != k.victim && x.err != nil {
				return fmt.Errorf("worker demo-%d failed: %v (log in %s)", x.i, x.err, env.logPath(fmt.Sprintf("demo-%d", x.i)))
			}
			continue
		case <-tick.C:
		}
		parts, workers, err := store.Status(ctx)
		if err != nil {
			continue // the database may be busy; try again next tick
		}
		o.View.Draw(parts, workers, total, time.Since(priceStart))
		if k.victim == 0 && o.KillAt > 0 && o.Workers > 1 && float64(processed(parts)) >= o.KillAt*float64(total) {
			k.strike(procs, parts, workers, total)
		}
		if k.victim > 0 && !k.complete {
			if err := k.follow(ctx, store); err != nil {
				continue // the database may be busy; try again next tick
			}
		}
	}
	elapsed := time.Since(priceStart)
	if k.victim > 0 {
		// The workers are done: every takeover has its first batch.
		if k.taken, err = store.TakeoversFrom(ctx, k.victimID); err != nil {
			return err
		}
	}
	return summary(ctx, o, env, total, elapsed, k, time.Since(began))
}

type workerExit struct {
	i   int
	err error
}

// processed is how many records the contracts have priced.
func processed(parts []partition.PartitionStatus) int64 {
	var n int64
	for _, p := range parts {
		n += p.Processed
	}
	return n
}
