package distributor_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/partition"
)

// A service adds work to its accounts' partitions and runs a worker until
// all of it is processed. Each batch writes its output through the
// batch's fenced transaction, so it commits together with the checkpoint
// and only while this worker owns the partition.
func Example() {
	db, done := pgtest.ExampleDB() // a database with baton's schema applied
	defer done()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE invoices (account text, item bigint, PRIMARY KEY (account, item))`); err != nil {
		panic(err)
	}
	accounts := partition.NewStore(db, "").Kind("invoices")
	if _, err := accounts.AddWorks(ctx, []partition.Work{{Key: "acme", N: 3}, {Key: "globex", N: 2}}); err != nil {
		panic(err)
	}

	process := distributor.ProcessorFunc(func(ctx context.Context, b *distributor.Batch) (distributor.Result, error) {
		from, to := b.Checkpoint.Position+1, min(b.Checkpoint.Available, b.Checkpoint.Position+int64(b.Limit))
		if _, err := b.Tx.ExecContext(ctx, `INSERT INTO invoices SELECT ?, generate_series(?::bigint, ?::bigint)`,
			b.Lease.Key, from, to); err != nil {
			return distributor.Result{}, fmt.Errorf("invoicing %s: %w", b.Lease.Key, err)
		}
		return distributor.Result{Position: to}, nil
	})
	d, err := distributor.New(db, process, distributor.Config{
		Name: "invoicer", Kind: "invoices", BatchSize: 2,
		UntilDone: true, // return once every partition is processed
		Heartbeat: 100 * time.Millisecond, StaleAfter: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		panic(err)
	}
	if err := d.Run(ctx); err != nil {
		panic(err)
	}

	var invoiced int
	if err := db.NewRaw(`SELECT count(*) FROM invoices`).Scan(ctx, &invoiced); err != nil {
		panic(err)
	}
	parts, _, err := accounts.Status(ctx)
	if err != nil {
		panic(err)
	}
	for _, p := range parts {
		fmt.Printf("%s %s: %d processed, %d pending\n", p.Key, p.State, p.Processed, p.Pending)
	}
	fmt.Println("invoices:", invoiced)
	// Output:
	// acme done: 3 processed, 0 pending
	// globex done: 2 processed, 0 pending
	// invoices: 5
}

// A long-running worker opens its own pool with the limits its lease
// needs and runs until interrupted, then hands its partitions back.
func Example_service() {
	cfg := distributor.Config{Name: "invoicer", Kind: "invoices", MaxPartitions: 4}
	stmt, lock, idle := cfg.ConnectionLimits()
	db, err := dbconn.Open(os.Getenv("DATABASE_URL"), dbconn.Options{
		StatementTimeout: stmt, LockTimeout: lock, IdleInTransactionTimeout: idle,
		MaxOpenConns: cfg.PoolSize(),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	var process distributor.Processor // the service's own, as in Example
	d, err := distributor.New(db, process, cfg)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := d.Run(ctx); err != nil { // returns after a graceful hand-back
		log.Fatal(err)
	}
}
