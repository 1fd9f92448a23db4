package distributor_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/uptrace/bun"

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
	tx, pid := faultTx(t, e)
	if _, err := tx.ExecContext(ctx, `SELECT FROM baton.tasks WHERE partition_key = 'p000' FOR NO KEY UPDATE`); err != nil {
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

// A failed batch's record (its back-off, which also hands the partition
// back) gets through when it waits longer than half a lease, here for the
// partition's row, which another transaction holds: the lease is renewed
// until the record is written, so the partition backs off as it should
// instead of being left to expire and retried by the next claim at once.
func TestFailureIsRecordedThroughASlowRecord(t *testing.T) {
	e := newEnv(t)
	e.addWork(30, "p000")
	ctx := context.Background()
	tx, pid := faultTx(t, e)
	p := newProc()
	p.before = func(_ context.Context, b *distributor.Batch) error {
		if b.Checkpoint.Position < 10 {
			return nil // the first batch, in the claim's own transaction, which locks the row
		}
		// A later batch's fence (FOR KEY SHARE) lets this lock through; the
		// failure's record (FOR UPDATE) waits for it.
		if _, err := tx.ExecContext(ctx, `SELECT FROM baton.tasks WHERE partition_key = 'p000' FOR NO KEY UPDATE`); err != nil {
			return fmt.Errorf("locking p000 for the test: %w", err)
		}
		return errors.New("record 3 is malformed")
	}
	ev := newEvents()
	cfg := fastConfig("a", ev)
	// As in TestStopReleasesThroughASlowRelease: a lease with seconds to
	// spare beyond the hold, however slow the machine.
	cfg.StaleAfter, cfg.ShutdownTimeout = 10*time.Second, time.Minute
	cfg.Backoff, cfg.MaxBackoff = time.Hour, time.Hour
	d := e.start(cfg, p)
	defer d.Stop()
	pgtest.WaitForLockWaitOn(t, e.db.DB, "last_error = ", pid)
	// The fault: the row stays locked past the half lease the record was
	// once allowed, well within the lease. The duration is the fault's,
	// not a wait for something to happen.
	time.Sleep(cfg.StaleAfter/2 + 500*time.Millisecond)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	ev.wait(t, time.Minute, "p000's failure recorded", func(x distributor.Event) bool {
		return x.Key == "p000" && (x.Kind == distributor.EventFailed || x.Kind == distributor.EventLost)
	})
	if n := ev.count(kind(distributor.EventLost)); n > 0 {
		t.Fatalf("%d partitions lost, want p000's failure recorded:\n%s", n, ev.dump())
	}
	var attempts int
	var owner *string
	var backingOff bool
	if err := e.db.QueryRow(`SELECT attempts, owner, lease_expires_at > now() + interval '30 minutes' FROM baton.tasks WHERE partition_key = 'p000'`).Scan(&attempts, &owner, &backingOff); err != nil {
		t.Fatal(err)
	}
	if attempts != 1 || owner != nil || !backingOff {
		t.Fatalf("p000 after its failure: attempts %d, owner %v, backing off an hour %v; want 1, none, true", attempts, owner, backingOff)
	}
}

// faultTx begins the transaction that holds a partition's row as the
// tests' fault (its lock waits time out after 10 s, so a wait on the
// tested code fails the test instead of hanging it), and returns its
// server process id; it is rolled back at the test's end if not
// committed.
func faultTx(t *testing.T, e *env) (bun.Tx, int) {
	t.Helper()
	ctx := context.Background()
	tx, err := e.db.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	var pid int
	if err := tx.QueryRowContext(ctx, `SELECT pg_backend_pid(), set_config('lock_timeout', '10s', true)`).Scan(&pid, new(string)); err != nil {
		t.Fatal(err)
	}
	return tx, pid
}
