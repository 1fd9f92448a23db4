package metrics_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/metrics"
	"github.com/batonhq/baton/partition"
)

// A worker instrumented with Prometheus metrics, served with its health
// and readiness probes: after it has processed the work of three
// partitions, a scrape shows its records and its hand-backs.
func Example() {
	db, done := pgtest.ExampleDB() // a database with baton's schema applied
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := partition.NewStore(db, "").Kind("invoices").AddWorks(ctx, []partition.Work{
		{Key: "acme", N: 10}, {Key: "globex", N: 5}, {Key: "initech", N: 7},
	}); err != nil {
		panic(err)
	}

	m := metrics.New()
	cfg := distributor.Config{Name: "worker-1", Kind: "invoices", UntilDone: true, Logger: slog.New(slog.DiscardHandler)}
	m.Instrument(&cfg)
	d, err := distributor.New(db, distributor.ProcessorFunc(func(ctx context.Context, b *distributor.Batch) (distributor.Result, error) {
		// Process the items after b.Checkpoint.Position here, through b.Tx.
		return distributor.Result{Position: min(b.Checkpoint.Position+int64(b.Limit), b.Checkpoint.Available)}, nil
	}), cfg)
	if err != nil {
		panic(err)
	}
	m.Watch(d)
	srv, err := metrics.Listen("127.0.0.1:0", m, db.PingContext, slog.New(slog.DiscardHandler))
	if err != nil {
		panic(err)
	}
	srv.Start()
	defer srv.Stop()
	if err := d.Run(ctx); err != nil {
		panic(err)
	}

	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := http.Get("http://" + srv.Addr() + path)
		if err != nil {
			panic(err)
		}
		lines := bufio.NewScanner(resp.Body)
		for lines.Scan() {
			l := lines.Text()
			if path != "/metrics" || strings.HasPrefix(l, "baton_records_processed_total") || strings.HasPrefix(l, "baton_releases_total") {
				fmt.Println(path, l)
			}
		}
		resp.Body.Close()
	}
	// Output:
	// /healthz ok
	// /readyz ready
	// /metrics baton_records_processed_total 22
	// /metrics baton_releases_total{reason="caught_up"} 3
	// /metrics baton_releases_total{reason="no_room"} 0
	// /metrics baton_releases_total{reason="rebalance"} 0
	// /metrics baton_releases_total{reason="shutdown"} 0
}
