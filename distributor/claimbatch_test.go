package distributor_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/distributor"
)

// history returns a partition's events as kind@version, oldest first.
func (e *env) history(key string) []string {
	e.t.Helper()
	rows, err := e.db.Query(`SELECT kind || '@' || version FROM baton.events WHERE partition_key = ? ORDER BY event_id`, key)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// A processor error in the transaction that claims an unowned partition
// with its first batch rolls everything back: while it fails, the claim is
// invisible to others (the row unowned at its old version, no output, no
// history). The failure is then recorded under a claim of its own (back-off,
// attempts), and the retry after the back-off claims and prices it in one
// transaction again.
func TestProcessorErrorInClaimTransactionLeavesNothingHalfDone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addWork(1, "bad")
	var failed atomic.Bool
	seen := make(chan string, 1)
	p := newProc()
	p.before = func(ctx context.Context, b *distributor.Batch) error {
		if !failed.CompareAndSwap(false, true) {
			return nil
		}
		// Seen from another session while the claim's transaction runs.
		var version int64
		var owner *string
		var outputs, events int
		err := e.db.QueryRow(`SELECT version, owner,
			(SELECT count(*) FROM test_output WHERE key = 'bad'),
			(SELECT count(*) FROM baton.events WHERE partition_key = 'bad')
			FROM baton.tasks WHERE partition_key = 'bad'`).Scan(&version, &owner, &outputs, &events)
		seen <- fmt.Sprintf("v%d owner=%v outputs=%d events=%d err=%v", version, owner, outputs, events, err)
		// Written, then failing: the write must roll back with the claim.
		if _, err := b.Tx.ExecContext(ctx, `INSERT INTO test_output VALUES ('bad', 1, 'x', 0)`); err != nil {
			return err
		}
		return errors.New("record 1 is malformed")
	}
	ev := newEvents()
	cfg := fastConfig("w", ev)
	cfg.UntilDone = true
	cfg.MaxAttempts = 3
	d := e.start(cfg, p)
	if err := waitDone(t, d, 30*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, ev.dump())
	}
	if got := <-seen; got != "v0 owner=<nil> outputs=0 events=0 err=<nil>" {
		t.Fatalf("during the failing claim transaction others saw %s; want the row untouched", got)
	}
	e.verify()
	// Claimed alone and failed at v1 (released by the failure to v2),
	// then claimed, priced and released in one transaction at v3.
	want := []string{"claimed@1", "failed@1", "claimed@3", "first_batch@3", "released@3"}
	if got := e.history("bad"); !slices.Equal(got, want) {
		t.Fatalf("history %v, want %v", got, want)
	}
	if n := ev.count(kind(distributor.EventFailed)); n != 1 {
		t.Fatalf("%d failure events, want 1:\n%s", n, ev.dump())
	}
}

// Two workers race for many one-item partitions, each claimed with its
// first batch in one transaction. Every item is priced exactly once, every
// lost race left nothing behind (each claim in the history has its first
// batch and release, in the claim's transaction), and each partition was
// claimed once.
func TestTinyPartitionsRacingWorkersClaimEachOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 120
	e.addWork(1, keys("t", n)...)
	var ds []*distributor.Distributor
	evs := []*events{newEvents(), newEvents()}
	for i, name := range []string{"a", "b"} {
		cfg := fastConfig(name, evs[i])
		cfg.UntilDone = true
		cfg.StaleAfter = oneTransactionLease
		ds = append(ds, e.start(cfg, newProc()))
	}
	for _, d := range ds {
		if err := waitDone(t, d, 60*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	e.verify()
	for _, k := range keys("t", n) {
		if got, want := e.history(k), []string{"claimed@1", "first_batch@1", "released@1"}; !slices.Equal(got, want) {
			t.Fatalf("%s: history %v, want %v", k, got, want)
		}
	}
	if split := e.notInOneTransaction(); split != 0 {
		t.Fatalf("%d partitions not claimed, priced and released in one transaction", split)
	}
	claimed := 0
	for _, ev := range evs {
		claimed += ev.count(kind(distributor.EventClaimed))
	}
	if claimed != n {
		t.Fatalf("%d claims reported, want %d", claimed, n)
	}
	t.Logf("claim races lost: %d", evs[0].count(kind(distributor.EventClaimLost))+evs[1].count(kind(distributor.EventClaimLost)))
}

// Nothing renews a lease before its claim commits, so a partition claimed
// with a long first batch must get its whole lease from the claim
// statement, not from the transaction's start: otherwise it is left with
// little of it and lost at once, before its first heartbeat, whenever the
// first batch takes most of a lease.
func TestLeaseOfAClaimWithALongFirstBatchRunsFromTheClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addWork(20, "slow")
	const lease = 3 * time.Second
	var first atomic.Bool
	ended := make(chan time.Time, 1)
	// The second batch catches up and releases the partition (lock mode),
	// which ends the lease: it waits until the test has read the lease the
	// claim left.
	leaseRead := make(chan struct{})
	p := newProc()
	p.before = func(ctx context.Context, b *distributor.Batch) error {
		if !first.CompareAndSwap(false, true) {
			select {
			case <-leaseRead:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		// Half a lease (the first batch may take up to lease less the
		// safety margin, 2.4 s here: a loaded machine must not push it
		// past that): counted from the transaction's start, the lease
		// would have 1.5 s left at the claim's commit.
		select {
		case <-time.After(1500 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		var now time.Time
		if err := e.db.QueryRow(`SELECT clock_timestamp()`).Scan(&now); err != nil {
			return err
		}
		ended <- now
		return nil
	}
	ev := newEvents()
	cfg := fastConfig("w", ev)
	cfg.Heartbeat, cfg.StaleAfter = time.Second, lease
	d := e.start(cfg, p)
	ev.wait(t, 20*time.Second, "the first batch", func(x distributor.Event) bool {
		return x.Kind == distributor.EventCheckpoint && x.Position == 10
	})
	end := <-ended
	var expires time.Time
	if err := e.db.QueryRow(`SELECT lease_expires_at FROM baton.tasks WHERE partition_key = 'slow'`).Scan(&expires); err != nil {
		t.Fatal(err)
	}
	close(leaseRead)
	if left := expires.Sub(end); left < lease-100*time.Millisecond {
		t.Errorf("lease ends %s after the first batch's processing ended; want about %s (the whole lease, from the claim)", left, lease)
	}
	ev.wait(t, 20*time.Second, "the second batch", func(x distributor.Event) bool {
		return x.Kind == distributor.EventCheckpoint && x.Position == 20
	})
	d.Stop()
	if n := ev.count(kind(distributor.EventLost)); n != 0 {
		t.Errorf("%d partitions lost; want none:\n%s", n, ev.dump())
	}
	e.verify()
}
