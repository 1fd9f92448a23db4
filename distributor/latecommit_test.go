package distributor_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/internal/testutil"
)

// A batch whose earlier attempt's commit lands after the retry started is a
// moved checkpoint, retried from the new position: not a failure that
// counts towards quarantine. The interleaving, with two transactions under
// the same claim:
//
//	late:  fence(10) write 11..20, advance 10→20 ............ commit
//	retry:             fence(10) ......... write 11..20 (waits on late's keys) → 23505
//
// The retry fails on the output's primary key before it reaches the
// checkpoint compare-and-set; the worker must re-read the checkpoint, see
// that it moved under its own claim, and carry on from 20. (The claim's
// first batch, 1..10, commits with the claim itself; the race is on the
// second, the first under a committed claim.)
func TestLateCommitOfOwnClaimIsAMovedCheckpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addWork(30, "k")
	ctx := context.Background()

	fenced := make(chan *distributor.Batch, 1)
	proceed := make(chan struct{})
	p := newProc()
	var started atomic.Bool
	p.before = func(ctx context.Context, b *distributor.Batch) error {
		if b.Checkpoint.Position == 10 && started.CompareAndSwap(false, true) {
			fenced <- b
			select {
			case <-proceed:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	ev := newEvents()
	cfg := fastConfig("w", ev)
	cfg.UntilDone = true
	cfg.BatchSize = 10
	cfg.MaxAttempts = 1 // a single counted failure would quarantine the partition
	// The late transaction holds the task row from its advance to its
	// commit, and heartbeats skip a locked row: a lease that outlasts that
	// however slow the machine, so that the worker's batch is not
	// cancelled for a lost lease before its write queues behind the late
	// one.
	cfg.StaleAfter = 30 * time.Second
	d := e.start(cfg, p)

	var b *distributor.Batch
	select {
	case b = <-fenced:
	case <-time.After(testutil.WaitTimeout(30 * time.Second)):
		t.Fatal("no batch started")
	}
	// The late attempt: same owner, same claim, fenced at 10 too.
	store := taskstore.NewStore(e.db, "")
	late, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Rollback()
	cp, err := store.Fence(ctx, late, b.Owner, b.Lease)
	if err != nil {
		t.Fatal(err)
	}
	res, err := newProc().Process(ctx, &distributor.Batch{Lease: b.Lease, Owner: b.Owner, Tx: late, Checkpoint: cp, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Advance(ctx, late, b.Lease, cp.Position, res.Position, res.State); err != nil {
		t.Fatal(err)
	}
	// The worker's batch writes the same keys and queues behind the late
	// transaction; then the late commit lands.
	close(proceed)
	pgtest.WaitForLockWait(t, e.db.DB, "INSERT INTO test_output")
	if err := late.Commit(); err != nil {
		t.Fatal(err)
	}

	if err := waitDone(t, d, 30*time.Second); err != nil {
		t.Fatalf("worker: %v\nevents: %s", err, ev.dump())
	}
	if n := ev.count(func(x distributor.Event) bool {
		return x.Kind == distributor.EventFailed || x.Kind == distributor.EventQuarantined
	}); n != 0 {
		t.Fatalf("%d failure events for a late commit, want none: %s", n, ev.dump())
	}
	var attempts int
	var lastErr *string
	if err := e.db.QueryRow(`SELECT attempts, last_error FROM baton.tasks WHERE partition_key = 'k'`).Scan(&attempts, &lastErr); err != nil {
		t.Fatal(err)
	}
	if attempts != 0 || lastErr != nil {
		t.Fatalf("attempts %d, last_error %v; want 0 and none", attempts, lastErr)
	}
	e.verify()
}
