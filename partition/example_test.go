package partition_test

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/partition"
)

// A service adds work to its customers' partitions in its own
// transactions, numbering its items with the range AddWork returns, and
// reads the state of the work back.
func Example() {
	db, done := pgtest.ExampleDB() // a database with baton's schema applied
	defer done()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (customer text, seq bigint, item text, PRIMARY KEY (customer, seq))`); err != nil {
		panic(err)
	}

	orders := partition.NewStore(db, "").Kind("orders")
	place := func(customer string, items ...string) {
		err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			r, err := orders.AddWorkTx(ctx, tx, customer, int64(len(items)))
			if err != nil {
				return err
			}
			for i, item := range items {
				if _, err := tx.ExecContext(ctx, `INSERT INTO orders VALUES (?, ?, ?)`, customer, r.First+int64(i), item); err != nil {
					return err
				}
			}
			fmt.Printf("%s: items %d to %d\n", customer, r.First, r.Last)
			return nil
		})
		if err != nil {
			panic(err)
		}
	}
	place("acme", "anvil", "rocket")
	place("globex", "hammock")
	place("acme", "magnet")

	parts, _, err := orders.Status(ctx)
	if err != nil {
		panic(err)
	}
	for _, p := range parts {
		fmt.Printf("%s %s: %d processed, %d pending\n", p.Key, p.State, p.Processed, p.Pending)
	}
	// Output:
	// acme: items 1 to 2
	// globex: items 1 to 1
	// acme: items 3 to 3
	// acme pending: 0 processed, 3 pending
	// globex pending: 0 processed, 1 pending
}
