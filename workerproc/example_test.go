package workerproc_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/workerproc"
)

// A worker command builds a Config from its flags and runs the process:
// here a distributor that runs its partitions until all work is done,
// then stops every component in reverse order. A long-running worker
// leaves out UntilDone and stops when its context is cancelled; with
// MetricsAddr, Console or Jobs set, Run serves those beside it.
func Example() {
	db, done := pgtest.ExampleDB() // a database with baton's schema applied
	defer done()
	ctx := context.Background()
	emails := partition.NewStore(db, "").Kind("emails")
	if _, err := emails.AddWorks(ctx, []partition.Work{{Key: "newsletter", N: 40}, {Key: "receipts", N: 7}}); err != nil {
		panic(err)
	}

	send := distributor.ProcessorFunc(func(ctx context.Context, b *distributor.Batch) (distributor.Result, error) {
		to := min(b.Checkpoint.Available, b.Checkpoint.Position+int64(b.Limit))
		// Send items Checkpoint.Position+1 … to of partition b.Lease.Key.
		return distributor.Result{Position: to}, nil
	})
	err := workerproc.Run(ctx, workerproc.Config{
		DB:        db,
		Processor: send,
		Distributor: distributor.Config{
			Name: "mailer", Kind: "emails", UntilDone: true,
			Heartbeat: 100 * time.Millisecond, StaleAfter: time.Second,
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		panic(err)
	}

	parts, _, err := emails.Status(ctx)
	if err != nil {
		panic(err)
	}
	for _, p := range parts {
		fmt.Printf("%s %s: %d processed\n", p.Key, p.State, p.Processed)
	}
	// Output:
	// newsletter done: 40 processed
	// receipts done: 7 processed
}
