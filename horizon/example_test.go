package horizon_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/batonhq/baton/horizon"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/schema"
)

// A report left open in a REPEATABLE READ transaction holds back the xmin
// horizon: every row version baton's heartbeats leave dead behind it stays
// until the report ends. Read finds it, with its statement's literals
// hidden.
func Example() {
	db, done := pgtest.ExampleDB() // a database with baton's schema applied
	defer done()
	ctx := context.Background()

	report, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		panic(err)
	}
	defer report.Rollback()
	if _, err := report.ExecContext(ctx, `SET LOCAL application_name = 'monthly-report'`); err != nil {
		panic(err)
	}
	var pid int
	if err := report.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		panic(err)
	}
	if _, err := report.ExecContext(ctx, `SELECT count(*) FROM baton.tasks WHERE partition_key = 'acme'`); err != nil {
		panic(err)
	}

	r, err := horizon.NewReader(db, schema.Default).Read(ctx, horizon.WarnAfterDefault)
	if err != nil {
		panic(err)
	}
	for _, h := range r.Holders {
		if h.PID == pid { // the server may have other sessions; show ours
			fmt.Printf("%s %q %s: %s\n", h.Kind, h.ApplicationName, h.State, h.Query)
		}
	}
	fmt.Println("warning:", r.Warning)
	fmt.Println("tasks table listed:", slices.ContainsFunc(r.Tables, func(t horizon.Table) bool { return t.Name == "tasks" }))
	// Output:
	// session "monthly-report" idle in transaction: SELECT count(*) FROM baton.tasks WHERE partition_key = '…'
	// warning: false
	// tasks table listed: true
}
