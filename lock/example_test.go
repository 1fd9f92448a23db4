package lock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/lock"
)

// Two transactions want the same instrument. The first locks its key and
// holds it until it commits; the second gives up after its lock timeout,
// and a third, begun after the commit, gets the key at once. No row for
// the key needs to exist.
func Example() {
	db, done := pgtest.ExampleDB() // a database with baton's schema applied
	defer done()
	ctx := context.Background()
	const key = "BondBO:DK0015966592"
	opts := lock.Options{Timeout: 200 * time.Millisecond}

	first, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	if err := lock.Acquire(ctx, first, key, opts); err != nil {
		panic(err)
	}
	fmt.Println("first: locked", key)

	second, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	err = lock.Acquire(ctx, second, key, opts)
	fmt.Println("second: timed out:", errors.Is(err, lock.ErrTimeout))
	_ = second.Rollback() // a failed Acquire leaves the transaction aborted

	if err := first.Commit(); err != nil { // releases the key
		panic(err)
	}
	// docs:acquire
	err = db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		// lock.ErrTimeout after opts.Timeout (the transaction is then aborted);
		// exclusive until commit or rollback
		return lock.Acquire(ctx, tx, key, opts)
	})
	// docs:end
	fmt.Println("third: locked:", err == nil)
	// Output:
	// first: locked BondBO:DK0015966592
	// second: timed out: true
	// third: locked: true
}
