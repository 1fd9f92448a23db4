package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing/pricingschema"
)

// The micro-benchmarks time single protocol statements against a fresh
// database: pgtest's throwaway server, or TEST_DATABASE_URL (the report
// points it at its own server so that every number shares one
// configuration).

func TestMain(m *testing.M) { pgtest.Main(m, pricingschema.Set) }

// pendingTasks creates n task rows with pending work.
func pendingTasks(tb testing.TB, n int) (*bun.DB, *taskstore.Store) {
	tb.Helper()
	db := pgtest.NewDB(tb)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `
		INSERT INTO baton.tasks (partition_key, available, position)
		SELECT 'p-' || lpad(i::text, 7, '0'), 1000, 0 FROM generate_series(1, ?) i`, n); err != nil {
		tb.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `VACUUM ANALYZE baton.tasks`); err != nil {
		tb.Fatal(err)
	}
	return db, taskstore.NewStore(db, "")
}

func benchWorker(name string) taskstore.Worker {
	return taskstore.Worker{InstanceID: name + partition.InstanceSeparator + instanceSuffix(), Name: name, Hostname: "bench", Mode: "lock"}
}

// claimN claims n partitions for w.
func claimN(tb testing.TB, store *taskstore.Store, w taskstore.Worker, n int) []partition.Lease {
	tb.Helper()
	ctx := context.Background()
	var leases []partition.Lease
	for len(leases) < n {
		cands, err := store.Candidates(ctx, min(1000, n-len(leases)))
		if err != nil {
			tb.Fatal(err)
		}
		if len(cands) == 0 {
			tb.Fatalf("only %d of %d partitions claimable", len(leases), n)
		}
		won, err := store.Claim(ctx, w.InstanceID, time.Hour, cands)
		if err != nil {
			tb.Fatal(err)
		}
		for _, c := range won {
			leases = append(leases, c.Lease)
		}
	}
	return leases
}

// BenchmarkHeartbeat is the batched heartbeat statement of a worker holding
// 1, 10, 100 and 1000 leases: one statement renews them all.
func BenchmarkHeartbeat(b *testing.B) {
	for _, n := range []int{1, 10, 100, 1000} {
		b.Run(fmt.Sprintf("leases=%d", n), func(b *testing.B) {
			_, store := pendingTasks(b, 2000)
			w := benchWorker("hb")
			leases := claimN(b, store, w, n)
			ctx := context.Background()
			for b.Loop() {
				renewed, err := store.HeartbeatBelow(ctx, w, time.Hour, time.Hour+time.Hour, leases)
				if err != nil {
					b.Fatal(err)
				}
				if len(renewed) != n {
					b.Fatalf("renewed %d of %d", len(renewed), n)
				}
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "leases/s")
		})
	}
}

// BenchmarkCandidates is the claim poll's scan of the claimable index head.
func BenchmarkCandidates(b *testing.B) {
	for _, parts := range []int{1000, 100_000} {
		b.Run(fmt.Sprintf("partitions=%d", parts), func(b *testing.B) {
			_, store := pendingTasks(b, parts)
			ctx := context.Background()
			for b.Loop() {
				cands, err := store.Candidates(ctx, 12)
				if err != nil {
					b.Fatal(err)
				}
				if len(cands) != 12 {
					b.Fatalf("%d candidates", len(cands))
				}
			}
		})
	}
}

// BenchmarkClaim is the claim compare-and-set of one candidate (the scan
// and the release that makes the row claimable again are not timed).
func BenchmarkClaim(b *testing.B) {
	for _, parts := range []int{1000, 100_000} {
		b.Run(fmt.Sprintf("partitions=%d", parts), func(b *testing.B) {
			_, store := pendingTasks(b, parts)
			w := benchWorker("claim")
			ctx := context.Background()
			for b.Loop() {
				b.StopTimer()
				cands, err := store.Candidates(ctx, 1)
				if err != nil || len(cands) != 1 {
					b.Fatalf("candidates: %v (%d)", err, len(cands))
				}
				b.StartTimer()
				won, err := store.Claim(ctx, w.InstanceID, time.Minute, cands)
				if err != nil || len(won) != 1 {
					b.Fatalf("claim: %v (%d won)", err, len(won))
				}
				b.StopTimer()
				if _, err := store.Release(ctx, w.InstanceID, []partition.Lease{won[0].Lease}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// BenchmarkClaimCycle is a whole claim as the distributor makes it: scan,
// compare-and-set, and the release (with its notification) when done.
func BenchmarkClaimCycle(b *testing.B) {
	_, store := pendingTasks(b, 10_000)
	w := benchWorker("cycle")
	ctx := context.Background()
	for b.Loop() {
		cands, err := store.Candidates(ctx, 12)
		if err != nil || len(cands) == 0 {
			b.Fatalf("candidates: %v", err)
		}
		won, err := store.Claim(ctx, w.InstanceID, time.Minute, cands[:1])
		if err != nil || len(won) != 1 {
			b.Fatalf("claim: %v", err)
		}
		if _, err := store.Release(ctx, w.InstanceID, []partition.Lease{won[0].Lease}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
}
