package main

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/backlog"
	"github.com/batonhq/baton/internal/pgtest"
)

// backlogPartitions is the table size the backlog statement is measured
// at: 100,000 partitions, a fifth of them pending, 20 live workers.
const backlogPartitions = 100_000

// backlogTable creates the partitions and runs two checkpoint rounds over
// every pending one (as workers would), then vacuums.
func backlogTable(tb testing.TB) *bun.DB {
	tb.Helper()
	ctx := context.Background()
	db := pgtest.NewDB(tb)
	for _, q := range []string{
		`INSERT INTO baton.tasks (kind, partition_key, available, position)
		 SELECT 'pricing', 'c-' || lpad(i::text, 7, '0'), 1000, CASE WHEN i % 5 = 0 THEN 0 ELSE 1000 END
		   FROM generate_series(1, ` + itoa(backlogPartitions) + `) i`,
		`INSERT INTO baton.workers (instance_id, name, kind, expires_at)
		 SELECT 'w' || i || '#1', 'w' || i, 'pricing', now() + interval '1 day' FROM generate_series(1, 20) i`,
		`VACUUM ANALYZE baton.tasks`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			tb.Fatal(err)
		}
	}
	churn(tb, db)
	if _, err := db.ExecContext(ctx, `VACUUM ANALYZE baton.tasks`); err != nil {
		tb.Fatal(err)
	}
	return db
}

// churn moves every pending partition's checkpoint twice: heap-only
// updates whose old versions stay while the horizon is pinned.
func churn(tb testing.TB, db *bun.DB) {
	tb.Helper()
	for range 2 {
		if _, err := db.ExecContext(context.Background(),
			`UPDATE baton.tasks SET position = position + 1 WHERE available > position`); err != nil {
			tb.Fatal(err)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// readBacklog times one computation of the figures (Read: a recording
// read within the sampling interval of another would publish that sample
// without reading the task table).
func readBacklog(tb testing.TB, r *backlog.Reader) time.Duration {
	tb.Helper()
	start := time.Now()
	figs, err := r.Read(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	if len(figs) != 1 || figs[0].PendingPartitions != backlogPartitions/5 {
		tb.Fatalf("figures %+v, want %d pending partitions", figs, backlogPartitions/5)
	}
	return time.Since(start)
}

// BenchmarkBacklogStatement is the backlog statement (package backlog,
// the one the workers serving metrics run every 15 s) at 100,000
// partitions. The baseline is its median over 15 reads measured first in
// the same run; then a session pins the xmin horizon, the workers' churn
// runs twice more (its old row versions stay), and the loop measures the
// statement: x_baseline is its time over the baseline's. Last, the
// recording read that publishes a sample another worker stored moments
// ago, against the same baseline.
func BenchmarkBacklogStatement(b *testing.B) {
	db := backlogTable(b)
	r, err := backlog.New(pgtest.Handle(db), backlog.Config{})
	if err != nil {
		b.Fatal(err)
	}
	base := make([]time.Duration, 15)
	for i := range base {
		base[i] = readBacklog(b, r)
	}
	slices.Sort(base)
	baseline := base[len(base)/2]
	for _, pinned := range []bool{false, true} {
		name := "partitions=100000/unpinned"
		if pinned {
			name = "partitions=100000/pinned"
		}
		b.Run(name, func(b *testing.B) {
			if pinned {
				release, _, err := pin(context.Background(), db)
				if err != nil {
					b.Fatal(err)
				}
				defer release()
				churn(b, db)
			}
			var total time.Duration
			n := 0
			for b.Loop() {
				total += readBacklog(b, r)
				n++
			}
			b.ReportMetric(float64(baseline.Microseconds())/1000, "baseline_ms")
			b.ReportMetric(float64(total)/float64(n)/float64(baseline), "x_baseline")
		})
	}
	// What every other worker of a fleet pays in the same interval: a
	// recording read that finds the sample just stored and publishes it.
	b.Run("partitions=100000/published-sample", func(b *testing.B) {
		pub, err := backlog.New(pgtest.Handle(db), backlog.Config{SampleEvery: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := pub.Sample(context.Background()); err != nil {
			b.Fatal(err)
		}
		var total time.Duration
		n := 0
		for b.Loop() {
			start := time.Now()
			figs, err := pub.Sample(context.Background())
			if err != nil || len(figs) != 1 {
				b.Fatalf("%+v, %v", figs, err)
			}
			total += time.Since(start)
			n++
		}
		b.ReportMetric(float64(baseline.Microseconds())/1000, "baseline_ms")
		b.ReportMetric(float64(total)/float64(n)/float64(baseline), "x_baseline")
	})
}
