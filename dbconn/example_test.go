package dbconn_test

import (
	"context"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
)

// A worker opens its pool with server-side limits, so that a hung or
// cut-off process cannot hold row locks for long. Open finds out by
// itself whether it reaches PostgreSQL directly or through a transaction
// pooler, and every transaction begun on the handle carries the limits.
func Example() {
	url, drop := pgtest.ExampleURL() // postgres://user:password@host:port/database
	defer drop()
	db, err := dbconn.Open(url, dbconn.Options{
		ApplicationName:  "invoicer",
		StatementTimeout: 5 * time.Second, LockTimeout: 2 * time.Second, IdleInTransactionTimeout: 5 * time.Second,
	})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	ctx := context.Background()
	if err := dbconn.Ping(ctx, db, url); err != nil { // any error names the URL without its password
		panic(err)
	}
	fmt.Println("pooled:", db.Pooled())

	err = db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var stmt, lock string
		if err := tx.NewRaw(`SELECT current_setting('statement_timeout'), current_setting('lock_timeout')`).Scan(ctx, &stmt, &lock); err != nil {
			return fmt.Errorf("reading the timeouts: %w", err)
		}
		fmt.Println("statement_timeout:", stmt, "lock_timeout:", lock)
		return nil
	})
	if err != nil {
		panic(err)
	}

	fmt.Println(dbconn.Redact("postgres://invoicer:s3cret@db.internal:5432/billing"))
	// Output:
	// pooled: false
	// statement_timeout: 5s lock_timeout: 2s
	// postgres://invoicer:xxxxx@db.internal:5432/billing
}
