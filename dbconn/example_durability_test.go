package dbconn_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/partition"
)

// A handle the application opens itself counts the commits PostgreSQL
// reports as not confirmed by its synchronous standby once its pgx
// configuration carries the notice handler; a producer asks the
// connection it committed on.
func ExampleWatchNotices() {
	url, drop := pgtest.ExampleURL() // a database with baton's schema applied
	defer drop()
	ctx := context.Background()
	// docs:wrap
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		panic(err)
	}
	cfg.OnNotice = dbconn.WatchNotices(cfg.OnNotice, nil)
	sqldb := stdlib.OpenDB(*cfg)
	// docs:end
	wrapped, err := dbconn.Wrap(ctx, bun.NewDB(sqldb, pgdialect.New()), dbconn.Access{})
	if err != nil {
		panic(err)
	}
	defer wrapped.Close()

	db, err := dbconn.Open(url, dbconn.Options{})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	store := partition.NewStore(db, "")

	// docs:producer
	before := db.NotReplicatedCommits()
	err = db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		_, err := store.AddWorkTx(ctx, tx, "acme", 3)
		return err
	})
	if err != nil {
		panic(err)
	}
	if db.NotReplicatedCommits() > before {
		fmt.Println("a commit of the handle's since before went to the primary only: check it after a failover")
	}
	// docs:end
	fmt.Println("not replicated:", db.NotReplicatedCommits()-before)
	// Output:
	// not replicated: 0
}
