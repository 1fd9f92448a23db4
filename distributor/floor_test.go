package distributor_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pglocal"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/schema"
)

// floorConfig is a polling worker (it hears no notification, so only its
// reads can find a partition below its floor) with a short claim-floor
// margin and full-read period.
func floorConfig(ev *events) distributor.Config {
	cfg := fastConfig("w", ev)
	cfg.PollOnly = true
	cfg.FloorMargin = 100 * time.Millisecond
	cfg.FullReadInterval = time.Second
	return cfg
}

// slack covers a busy machine's scheduling on top of a bound.
const slack = 2 * time.Second

// claimedWithin waits for key's claim and fails the test unless it came
// within bound (plus slack) of since.
func claimedWithin(t *testing.T, ev *events, key string, since time.Time, bound time.Duration) {
	t.Helper()
	claim := ev.wait(t, 60*time.Second, "the claim of "+key, func(x distributor.Event) bool {
		return x.Kind == distributor.EventClaimed && x.Key == key
	})
	if took := claim.At.Sub(since); took > bound+slack {
		t.Fatalf("%s claimed %v after it became claimable; the bound is %v (+%v slack)\nevents:\n%s", key, took, bound, slack, ev.dump())
	} else {
		t.Logf("%s claimed %v after it became claimable (bound %v)", key, took, bound)
	}
}

// A partition made claimable by a transaction held open longer than the
// floor's margin before its commit lands below the floor of a worker that
// read meanwhile; it is claimed within FullReadInterval + PollInterval of
// the commit, though no notification announces it.
func TestStalledCommitIsClaimedWithinTheFullReadPeriod(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	ev := newEvents()
	cfg := floorConfig(ev)
	e.start(cfg, newProc())

	tx, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := partition.NewStore(e.db, "").AddWorkTx(ctx, tx, "late", 5); err != nil {
		t.Fatal(err)
	}
	// The transaction stays open for more than the margin; then another
	// partition's work moves the worker's floor past the uncommitted row.
	var held bool
	if err := tx.QueryRowContext(ctx, `SELECT pg_sleep(0.3), clock_timestamp() - claimable_at > ? * interval '1 microsecond'
		FROM baton.tasks WHERE partition_key = 'late'`, cfg.FloorMargin.Microseconds()).Scan(new(string), &held); err != nil {
		t.Fatal(err)
	}
	if !held {
		t.Fatal("the transaction was not held open longer than the floor's margin (the test's premise)")
	}
	e.addWork(5, "early")
	ev.wait(t, 30*time.Second, "early released", func(x distributor.Event) bool {
		return x.Kind == distributor.EventReleased && x.Key == "early"
	})
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	claimedWithin(t, ev, "late", time.Now(), cfg.FullReadInterval+cfg.PollInterval)
}

// A new primary whose clock is a minute behind the old one's (here the
// same data directory restarted under libfaketime): partitions made
// claimable afterwards have claimable_at a minute below the floor the
// worker's reads set before the step; they are claimed within
// FullReadInterval + PollInterval all the same.
func TestClockStepBackIsClaimedWithinTheFullReadPeriod(t *testing.T) {
	t.Parallel()
	const libfaketime = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
	if _, err := os.Stat(libfaketime); err != nil {
		t.Skipf("libfaketime not installed: %v", err)
	}
	ctx := context.Background()
	base, err := os.MkdirTemp("", "baton-floor-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	srv, err := pglocal.Start(ctx, pglocal.Options{Dir: filepath.Join(base, "data")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop(pglocal.Immediate) })
	dsn := srv.URL("postgres")
	db := pgtest.OpenDB(t, dsn, dbconn.Options{MaxOpenConns: 4})
	if _, err := schema.Migrate(ctx, db, schema.Config{}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE test_output (
		key text NOT NULL, n bigint NOT NULL, owner text NOT NULL, version bigint NOT NULL,
		PRIMARY KEY (key, n))`); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dsn: dsn, db: db}
	ev := newEvents()
	cfg := floorConfig(ev)
	e.start(cfg, newProc())

	// The worker's reads find this one and set its floor on the old clock.
	e.addWork(5, "before")
	ev.wait(t, 30*time.Second, "before released", func(x distributor.Event) bool {
		return x.Kind == distributor.EventReleased && x.Key == "before"
	})
	var old time.Time
	if err := db.QueryRow(`SELECT now()`).Scan(&old); err != nil {
		t.Fatal(err)
	}

	srv.Stop(pglocal.Fast)
	srv.SetEnv("LD_PRELOAD="+libfaketime, "FAKETIME=-60s", "DONT_FAKE_MONOTONIC=1")
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	// A new handle: the old one's connections were ended by the restart.
	e.db = pgtest.OpenDB(t, dsn, dbconn.Options{MaxOpenConns: 4})
	var now time.Time
	if err := e.db.QueryRow(`SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	if step := old.Sub(now); step < 50*time.Second {
		t.Fatalf("the restarted server's clock reads %v, %v after the old one's last read: want about a minute behind (the test's premise)", now, -step)
	}

	e.addWork(5, "after")
	claimedWithin(t, ev, "after", time.Now(), cfg.FullReadInterval+cfg.PollInterval)
}
