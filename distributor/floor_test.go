package distributor_test

import (
	"context"
	"testing"
	"time"

	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/partition"
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
	if _, err := partition.NewStore(e.db, "").AddWork(ctx, tx, "late", 5); err != nil {
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
