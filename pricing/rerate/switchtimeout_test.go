package rerate_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/pricing/ingest"
	"github.com/batonhq/baton/pricing/pricer"
	"github.com/batonhq/baton/pricing/rerate"
)

// The switch to a re-priced generation moves the contract's whole output,
// which can take longer than the statement timeout that bounds a batch's
// statements (here: every move made slower than it by a trigger). It still
// completes, rather than failing until the contract is quarantined, and
// verification finds every record priced right.
func TestSwitchOutlastingTheStatementTimeoutCompletes(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	admin := pgtest.OpenDB(t, url, dbconn.Options{MaxOpenConns: 2})
	ctx := context.Background()
	if _, err := ingest.NewStore(admin, "").Load(ctx, ingest.Options{TiersPath: noDiscountTiers(t), RecordsPath: vectors + "records.csv"}); err != nil {
		t.Fatal(err)
	}
	run := func(db *dbconn.DB) {
		t.Helper()
		d, err := distributor.New(db, pricer.NewStore(db, "").Processor(), distributor.Config{Name: "switch", UntilDone: true, MaxAttempts: 2,
			Heartbeat: 200 * time.Millisecond, StaleAfter: 4 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, testutil.WaitTimeout(2*time.Minute))
		defer cancel()
		if err := d.Run(rctx); err != nil {
			t.Fatalf("pricing: %v", err)
		}
	}
	run(pgtest.OpenDB(t, url, dbconn.Options{MaxOpenConns: 12}))

	// From here every switch sleeps past the workers' statement timeout.
	if _, err := admin.Exec(`
		CREATE FUNCTION slow_switch() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(1.5); RETURN NULL; END $$;
		CREATE TRIGGER slow_switch AFTER INSERT ON baton.priced_superseded FOR EACH STATEMENT EXECUTE FUNCTION slow_switch()`); err != nil {
		t.Fatal(err)
	}
	tiers := vectorTiers(t)
	var reqs []rerate.Request
	for _, c := range []string{"implicit-zero-tier", "unsorted-tier-rows"} {
		reqs = append(reqs, rerate.Request{Contract: c, NewTiers: tiers[c], Reason: "tiers corrected", StartedBy: "test"})
	}
	if _, err := start(t, admin, reqs); err != nil {
		t.Fatal(err)
	}
	run(pgtest.OpenDB(t, url, dbconn.Options{MaxOpenConns: 12, StatementTimeout: time.Second}))
	if n := count(t, admin.DB, `SELECT count(*) FROM baton.generations WHERE state = 'current' AND generation = 2`); n != 2 {
		t.Fatalf("%d contracts switched to generation 2, want 2", n)
	}
	if n := count(t, admin.DB, `SELECT count(*) FROM baton.tasks WHERE failed_at IS NOT NULL`); n != 0 {
		t.Fatalf("%d contracts failed", n)
	}
	verifyClean(t, admin)
}
