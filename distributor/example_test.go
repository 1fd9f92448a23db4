package distributor_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
)

// A service embeds the distributor with its own processor. Output is
// written through the batch's fenced transaction, so it commits together
// with the checkpoint and only while this worker owns the partition.
func Example() {
	cfg := distributor.Config{Name: "invoicer", MaxPartitions: 4}
	stmt, lock, idle := cfg.ConnectionLimits()
	db, err := dbconn.Open(os.Getenv("DATABASE_URL"), dbconn.Options{
		StatementTimeout: stmt, LockTimeout: lock, IdleInTransactionTimeout: idle,
		MaxOpenConns: cfg.MaxPartitions + 3,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	process := distributor.ProcessorFunc(func(ctx context.Context, b *distributor.Batch) (distributor.Result, error) {
		from, to := b.Checkpoint.Position+1, b.Checkpoint.Position+int64(b.Limit)
		// Read items (from..to] of partition b.Lease.Key and write results
		// with b.Tx; call external systems with b.IdempotencyKey().
		if _, err := b.Tx.ExecContext(ctx, `INSERT INTO invoices (account, item) SELECT ?, generate_series(?::bigint, ?::bigint)`,
			b.Lease.Key, from, to); err != nil {
			return distributor.Result{}, fmt.Errorf("invoicing %s: %w", b.Lease.Key, err)
		}
		return distributor.Result{Position: to}, nil
	})

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
