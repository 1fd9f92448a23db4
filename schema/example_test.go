package schema_test

import (
	"context"
	"fmt"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/schema"
)

// A service keeps baton's tables in a PostgreSQL schema of their own,
// "jobs", beside its own tables. It migrates at start-up (any number of
// processes may do so at once), checks that the database matches the
// binary, and names baton's tables in its SQL through the placeholder.
func Example() {
	db, done := pgtest.ExampleDB() // a database; "jobs" does not exist yet
	defer done()
	ctx := context.Background()
	cfg := schema.Config{Schema: "jobs"} // the core set alone

	applied, err := schema.Migrate(ctx, db, cfg)
	if err != nil {
		panic(err)
	}
	fmt.Println("first applied:", applied[0]) // and every later one of the set
	applied, err = schema.Migrate(ctx, db, cfg)
	if err != nil {
		panic(err)
	}
	fmt.Println("second migration applied:", len(applied))

	if err := schema.Check(ctx, db, cfg); err != nil { // schema.ErrOutdated or ErrTooNew otherwise
		panic(err)
	}
	status, err := schema.Inspect(ctx, db, cfg)
	if err != nil {
		panic(err)
	}
	fmt.Println("current:", status.Current(), "pending:", len(status.Pending))

	query := schema.SQL(cfg.Schema, `SELECT count(*) FROM {{.Schema}}.tasks`)
	var tasks int
	if err := db.NewRaw(query).Scan(ctx, &tasks); err != nil {
		panic(err)
	}
	fmt.Println(query, "=", tasks)
	// Output:
	// first applied: core/20261122000001_init
	// second migration applied: 0
	// current: true pending: 0
	// SELECT count(*) FROM "jobs".tasks = 0
}
