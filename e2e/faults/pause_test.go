package faults

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing/pricer"
)

// Pausing half the contracts in progress while their batches are in flight, with a worker
// SIGKILLed right after (one holding a paused contract) and replaced: the
// live owners release the paused contracts at their checkpoints, no paused
// contract is claimed or taken over while paused (the killed worker's
// stay its own), the other contracts are priced to the end, and after the
// resume every record is priced exactly once with the exact amounts.
func TestPauseWhileBatchesInFlight(t *testing.T) {
	for i := range schedules() {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			r := newRun(t, scenarioSeed(t))
			r.seedData(size())
			for range 3 {
				r.start(r.dsn)
			}
			r.waitProgress(0.2 + 0.2*r.rng.Float64())
			ctx := context.Background()
			store := partition.NewStore(r.db, "").Kind(pricer.Kind)
			// Half of the contracts held now (batches in flight) with
			// records left are paused; the others go on.
			var held []string
			for _, w := range r.workers {
				held = append(held, r.heldBy(w.name)...)
			}
			paused := slices.DeleteFunc(r.pendingContracts(), func(k string) bool { return !slices.Contains(held, k) })
			if len(paused) < 2 {
				t.Fatalf("%d contracts with records left are held; want two or more", len(paused))
			}
			r.rng.Shuffle(len(paused), func(i, j int) { paused[i], paused[j] = paused[j], paused[i] })
			paused = paused[:len(paused)/2]
			if _, err := store.Pause(ctx, "faults", "test", paused...); err != nil {
				t.Fatal(err)
			}
			pausedAt := r.dbNow()
			r.stats.fault("pause")
			w, kept := r.victimHolding("a paused contract", func(k string) bool { return slices.Contains(paused, k) })
			if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			w.killed = true
			r.stats.fault("sigkill")
			r.start(r.dsn)

			// Every other contract is priced; the paused ones wait, and
			// none is owned by a live worker (the killed worker's stay
			// its own until the resume).
			testutil.Eventually(t, 3*time.Minute, "every contract but the paused priced, the paused released", func() error {
				if left := slices.DeleteFunc(r.pendingContracts(), func(k string) bool { return slices.Contains(paused, k) }); len(left) > 0 {
					return fmt.Errorf("%d contracts not paused have records left", len(left))
				}
				var owned int
				if err := r.db.QueryRow(`SELECT count(*) FROM baton.tasks t JOIN baton.workers w ON w.instance_id = t.owner
					WHERE t.kind = ? AND coalesce(t.segment_of, t.partition_key) IN (?) AND w.expires_at > now() AND w.stopped_at IS NULL`,
					pricer.Kind, bun.List(paused)).Scan(&owned); err != nil {
					t.Fatal(err)
				}
				if owned > 0 {
					return fmt.Errorf("%d paused rows still held by live workers", owned)
				}
				return nil
			})
			var claims int
			if err := r.db.QueryRow(`SELECT count(*) FROM baton.events WHERE task_kind = ? AND kind IN ('claimed', 'takeover')
				AND at > ? AND partition_key IN (?)`, pricer.Kind, pausedAt, bun.List(paused)).Scan(&claims); err != nil {
				t.Fatal(err)
			}
			if claims > 0 {
				t.Errorf("%d claims of paused contracts while paused", claims)
			}
			t.Logf("paused %d contracts (%d held by the killed worker); the rest priced while they waited", len(paused), len(kept))

			if _, err := store.Resume(ctx, "faults", paused...); err != nil {
				t.Fatal(err)
			}
			r.waitAll(3 * time.Minute)
			r.check()
		})
	}
}

// pendingContracts lists the contracts with records not priced yet.
func (r *run) pendingContracts() []string {
	r.t.Helper()
	return r.keys(`SELECT partition_key FROM baton.partition_progress WHERE kind = ? AND pending > 0`, pricer.Kind)
}
