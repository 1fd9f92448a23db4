package distributor_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/distributor"
)

// timedStatement runs, in b's transaction, a statement that takes perItem
// of server time per item of n, under a statement timeout of limit.
func timedStatement(ctx context.Context, b *distributor.Batch, n int, perItem, limit time.Duration) error {
	if _, err := b.Tx.ExecContext(ctx, fmt.Sprintf("SET LOCAL statement_timeout = %d", limit.Milliseconds())); err != nil {
		return err
	}
	_, err := b.Tx.ExecContext(ctx, `SELECT pg_sleep(?)`, (time.Duration(n) * perItem).Seconds())
	return err
}

// A group whose first batches together outlast the statement timeout is
// not formed again and again: groups take fewer items after it, and every
// partition is processed, exactly once, without a failure counted.
func TestGroupTooLongForTheStatementTimeoutShrinks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	all := keys("big", 24)
	e.addWork(1000, all...)
	ev := newEvents()
	cfg := groupConfig("w", ev)
	cfg.BatchSize = 1000
	p := newGroupProc()
	// 0.1 ms of server time per item under a 300 ms timeout: a group of
	// 8 × 1,000 items takes 0.8 s and is cancelled by the server; 2,000
	// items fit.
	type attempt struct {
		items  int
		failed bool
	}
	var mu sync.Mutex
	var attempts []attempt
	p.beforeGroup = func(ctx context.Context, g *distributor.Group) error {
		n := 0
		for _, b := range g.Batches {
			n += b.Limit
		}
		err := timedStatement(ctx, g.Batches[0], n, 100*time.Microsecond, 300*time.Millisecond)
		mu.Lock()
		attempts = append(attempts, attempt{n, err != nil})
		mu.Unlock()
		return err
	}
	d := e.start(cfg, p)
	if err := waitDone(t, d, 60*time.Second); err != nil {
		t.Fatalf("%v\ngroups %v\n%s", err, attempts, ev.dump())
	}
	e.verify()
	if n := ev.count(kind(distributor.EventFailed)); n != 0 {
		t.Errorf("%d batches counted as failed; a transaction too long is no failure:\n%s", n, ev.dump())
	}
	// After a group too long, groups take fewer items: a few groups formed
	// before a failure was known may fail alike, but the same group is not
	// formed again and again (8,000 → 4,000 → 2,000 fits; at most the
	// groups in flight at once fail at each step).
	mu.Lock()
	defer mu.Unlock()
	if len(attempts) == 0 || !attempts[0].failed {
		t.Fatalf("group attempts %v; want the first, of 8,000 items, cancelled by the server", attempts)
	}
	failed := 0
	for _, a := range attempts {
		if a.failed {
			failed++
		}
	}
	if failed > 8 {
		t.Errorf("%d groups too long; want a few at most: attempts %v", failed, attempts)
	}
}

// A batch too long for the statement timeout is tried again at once with
// fewer items, so that any BatchSize finishes; nothing is counted as failed.
func TestBatchTooLongForTheStatementTimeoutIsHalved(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addWork(3000, "huge")
	ev := newEvents()
	cfg := fastConfig("w", ev)
	cfg.UntilDone, cfg.BatchSize, cfg.ClaimGroup = true, 3000, 1
	cfg.StaleAfter = oneTransactionLease
	p := newProc()
	// 0.2 ms per item under 300 ms: 3,000 items take 0.6 s, 750 fit.
	p.before = func(ctx context.Context, b *distributor.Batch) error {
		return timedStatement(ctx, b, b.Limit, 200*time.Microsecond, 300*time.Millisecond)
	}
	d := e.start(cfg, p)
	if err := waitDone(t, d, 60*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, ev.dump())
	}
	e.verify()
	if n := ev.count(kind(distributor.EventFailed)); n != 0 {
		t.Errorf("%d batches counted as failed; a batch too long is no failure:\n%s", n, ev.dump())
	}
	var attempts int
	if err := e.db.QueryRow(`SELECT attempts FROM baton.tasks WHERE partition_key = 'huge'`).Scan(&attempts); err != nil {
		t.Fatal(err)
	}
	if attempts != 0 {
		t.Errorf("attempts = %d, want 0", attempts)
	}
}

// A group given up mid-statement (its deadline passed while the server was
// still running it) leaves its rows locked on the server until the server
// notices. Its members, claimed again on their own, find them locked by
// this worker's own dying transaction: that is no claim lost to another
// worker, and they are not skipped as if it were.
func TestGroupGivenUpMidStatementIsNotALostClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	all := keys("d", 4)
	e.addWork(5, all...)
	ev := newEvents()
	cfg := groupConfig("w", ev)
	cfg.StaleAfter = 2 * time.Second // a group may take 1.6 s
	p := newGroupProc()
	var tried atomic.Bool
	p.beforeGroup = func(ctx context.Context, g *distributor.Group) error {
		if tried.Swap(true) {
			return nil
		}
		// Outlasts the group's deadline on the server: the client gives
		// up at 1.6 s, the server holds the fenced rows for 3 s.
		_, err := g.Tx.ExecContext(ctx, `SELECT pg_sleep(3)`)
		if err == nil {
			return errors.New("the group's statement outlived its deadline")
		}
		return err
	}
	d := e.start(cfg, p)
	if err := waitDone(t, d, 60*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, ev.dump())
	}
	e.verify()
	if n := ev.count(kind(distributor.EventClaimLost)); n != 0 {
		t.Errorf("%d claims reported lost with no other worker running:\n%s", n, ev.dump())
	}
}

// Batches grow from 1,000 items while they are quick, never past
// BatchSize, and a grown batch in flight when its worker stops is rolled
// back whole: the next owner resumes at the last committed checkpoint and
// every item is output exactly once.
func TestGrownBatchAbandonedMidwayIsTakenOverExactlyOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addWork(40000, "a", "b")
	ev := newEvents()
	cfg := fastConfig("first", ev)
	cfg.BatchSize, cfg.ClaimGroup, cfg.MaxPartitions = 8000, 1, 2
	cfg.StaleAfter = 4 * time.Second // BatchTarget 500 ms: batches under 250 ms grow
	cfg.ShutdownTimeout = 300 * time.Millisecond
	p := newProc()
	var mu sync.Mutex
	var limits []int
	var blocked atomic.Bool
	grown := make(chan string, 1)
	var from atomic.Int64 // where the abandoned batch started
	p.before = func(ctx context.Context, b *distributor.Batch) error {
		mu.Lock()
		limits = append(limits, b.Limit)
		mu.Unlock()
		if b.Limit > 1000 && !blocked.Swap(true) {
			// Write part of the batch, then hang until abandoned.
			if _, err := b.Tx.ExecContext(ctx, `INSERT INTO test_output (key, n, owner, version) VALUES (?, ?, ?, ?)`,
				b.Lease.Key, b.Checkpoint.Position+1, b.Owner, b.Lease.Version); err != nil {
				return err
			}
			from.Store(b.Checkpoint.Position)
			grown <- b.Lease.Key
			<-ctx.Done()
			return context.Cause(ctx)
		}
		return nil
	}
	d := e.start(cfg, p)
	var key string
	select {
	case key = <-grown:
	case <-time.After(60 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("no batch grew past 1,000 items; limits %v", limits)
	}
	d.Stop()

	heir := e.start(func() distributor.Config {
		c := fastConfig("heir", ev)
		c.UntilDone, c.BatchSize = true, 8000
		return c
	}(), newProc())
	if err := waitDone(t, heir, 60*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, ev.dump())
	}
	e.verify()
	var firstOwner int
	if err := e.db.QueryRow(`SELECT count(*) FROM test_output WHERE key = ? AND owner LIKE 'first#%'`, key).Scan(&firstOwner); err != nil {
		t.Fatal(err)
	}
	// Exactly its batches before the abandoned one (none, if the bound
	// had grown on the other partition before this one's first batch):
	// nothing of the abandoned batch's partial write.
	if want := from.Load(); int64(firstOwner) != want {
		t.Errorf("the first worker committed %d items of %s; want the %d before the abandoned batch", firstOwner, key, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if limits[0] != 1000 {
		t.Errorf("first batch limit %d, want 1000 (the start)", limits[0])
	}
	for _, l := range limits {
		if l > 8000 {
			t.Errorf("a batch of %d items, above BatchSize 8000: %v", l, limits)
		}
	}
}
