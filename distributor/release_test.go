package distributor_test

import (
	"context"
	"testing"
	"time"

	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/testutil"
)

// A graceful stop hands a partition back even when its release waits
// longer than half a lease, here for the partition's row, which another
// transaction holds (as a load's last step does; a busy server slows a
// release the same way): the lease is renewed until the release gets
// through, so the partition is released, not left to expire and be taken
// over by the next claim.
func TestStopReleasesThroughASlowRelease(t *testing.T) {
	e := newEnv(t)
	e.addWork(10, "p000")
	ev := newEvents()
	cfg := fastConfig("a", ev)
	cfg.Mode = distributor.ModeLeader // keeps the caught-up partition until the stop
	// A lease long enough that the row held past the half lease still
	// leaves seconds before the lease would end locally, however slowly a
	// busy machine gets from the row lock to the release; and a shutdown
	// timeout beyond both, which would otherwise abandon the release.
	cfg.StaleAfter, cfg.ShutdownTimeout = 10*time.Second, time.Minute
	d := e.start(cfg, newProc())
	ev.wait(t, 30*time.Second, "p000 processed", func(x distributor.Event) bool {
		return x.Kind == distributor.EventCheckpoint && x.Key == "p000" && x.Position == 10
	})

	ctx := context.Background()
	tx, err := e.db.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var pid int
	if err := tx.QueryRowContext(ctx, `SELECT pg_backend_pid() FROM baton.tasks WHERE partition_key = 'p000' FOR NO KEY UPDATE`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() { d.Stop(); close(stopped) }()
	pgtest.WaitForLockWaitOn(t, e.db.DB, "lease_expires_at = '-infinity'", pid)
	// The fault: the row stays locked past the half lease a release was
	// once allowed, and well within the lease (which ends locally
	// SafetyMargin, 2 s, before its 10 s run out). The duration is the
	// fault's, not a wait for something to happen.
	time.Sleep(cfg.StaleAfter/2 + 500*time.Millisecond)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	testutil.Receive(t, stopped, time.Minute, "the worker stopping")

	if n := ev.count(kind(distributor.EventLost)); n > 0 {
		t.Fatalf("%d partitions lost at the stop, want p000 released:\n%s", n, ev.dump())
	}
	rel := ev.wait(t, time.Second, "p000 released", func(x distributor.Event) bool {
		return x.Kind == distributor.EventReleased && x.Key == "p000"
	})
	if rel.Reason != "shutdown" {
		t.Fatalf("p000 released with reason %q, want shutdown", rel.Reason)
	}
	var owner *string
	if err := e.db.QueryRow(`SELECT owner FROM baton.tasks WHERE partition_key = 'p000'`).Scan(&owner); err != nil {
		t.Fatal(err)
	}
	if owner != nil {
		t.Fatalf("p000 still owned by %s after the stop", *owner)
	}
}
