package distributor_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/partition"
)

func TestUntilDoneProcessesEverythingExactlyOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addWork(35, keys("c", 20)...)
	ev := newEvents()
	cfg := fastConfig("solo", ev)
	cfg.UntilDone = true
	d := e.start(cfg, newProc())
	if err := waitDone(t, d, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	e.verify()
	// Every partition was released once it caught up, none is held.
	parts, workers, err := partition.NewStore(e.db, "").Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		if p.State != partition.StateDone || p.OwnerInstance != "" {
			t.Errorf("partition %s: state %s owner %q, want done and unowned", p.Key, p.State, p.OwnerInstance)
		}
	}
	if len(workers) != 0 {
		t.Errorf("%d live workers after until-done exit, want 0 (stopped workers are not live)", len(workers))
	}
}

// Many claimers racing for the same row: exactly one compare-and-set wins.
func TestClaimRaceExactlyOneWins(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addWork(1, "contested")
	store := taskstore.NewStore(e.db, "")
	cands, err := store.Candidates(context.Background(), 10)
	if err != nil || len(cands) != 1 {
		t.Fatalf("candidates = %v, %v; want one", cands, err)
	}
	const racers = 16
	var wins atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			won, err := store.Claim(context.Background(), "racer#"+string(rune('a'+i)), time.Minute, cands)
			if err != nil {
				t.Error(err)
			}
			wins.Add(int32(len(won)))
		}()
	}
	close(start)
	wg.Wait()
	if got := wins.Load(); got != 1 {
		t.Fatalf("%d racers won the claim, want exactly 1", got)
	}
	var version int64
	if err := e.db.QueryRow("SELECT version FROM baton.tasks WHERE partition_key = 'contested'").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version != cands[0].Version+1 {
		t.Fatalf("version = %d, want %d (bumped once)", version, cands[0].Version+1)
	}
}

// ghost is an owner driven by hand through the store, standing in for a
// worker that crashes or freezes at a chosen moment.
type ghost struct {
	e     *env
	store *taskstore.Store
	id    string
	lease partition.Lease
}

func claimAsGhost(t *testing.T, e *env, key string, ttl time.Duration) *ghost {
	t.Helper()
	g := &ghost{e: e, store: taskstore.NewStore(e.db, ""), id: "ghost#0001"}
	cands, err := g.store.Candidates(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	var mine []taskstore.Candidate
	for _, c := range cands {
		if c.Key == key {
			mine = append(mine, c)
		}
	}
	won, err := g.store.Claim(context.Background(), g.id, ttl, mine)
	if err != nil || len(won) != 1 {
		t.Fatalf("ghost claim of %s = %v, %v", key, won, err)
	}
	g.lease = won[0].Lease
	return g
}

// commitBatch runs one fenced batch of n items as the ghost.
func (g *ghost) commitBatch(ctx context.Context, n int) error {
	tx, err := g.e.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	cp, err := g.store.Fence(ctx, tx, g.id, g.lease)
	if err != nil {
		return err
	}
	res, err := newProc().Process(ctx, &distributor.Batch{Lease: g.lease, Owner: g.id, Tx: tx, Checkpoint: cp, Limit: n})
	if err != nil {
		return err
	}
	if err := g.store.Advance(ctx, tx, g.lease, cp.Position, res.Position, res.State); err != nil {
		return err
	}
	return tx.Commit()
}

// An owner that stops heartbeating (crashed or frozen) is taken over once
// its lease expires; the new owner waits for confirmation, resumes from the
// committed checkpoint with no gap and no duplicate, and the old owner's
// late commit is rejected by the fence.
func TestTakeoverAfterStaleConfirmResumeAndFence(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addWork(100, "k")
	ctx := context.Background()
	g := claimAsGhost(t, e, "k", 300*time.Millisecond)
	if err := g.commitBatch(ctx, 30); err != nil {
		t.Fatal(err)
	}
	// The ghost now freezes: no more heartbeats.
	var expiry time.Time
	if err := e.db.QueryRow(`SELECT lease_expires_at FROM baton.tasks WHERE partition_key = 'k'`).Scan(&expiry); err != nil {
		t.Fatal(err)
	}
	ev := newEvents()
	cfg := fastConfig("heir", ev)
	// A claim round may take StaleAfter/2: with fastConfig's 1s, a round
	// slowed past 500 ms by a busy machine gives up on a claim statement
	// that may still apply, and the row comes back by the heir's own
	// hand-back and a claim of an unowned row, not by the takeover under
	// test. The ghost's lease (300 ms) is what must end, not the heir's.
	cfg.UntilDone, cfg.StaleAfter = true, 4*time.Second
	d := e.start(cfg, newProc())

	claimed := ev.wait(t, 10*time.Second, "takeover claim", kind(distributor.EventClaimed))
	if !claimed.Takeover || claimed.Position != 30 {
		t.Fatalf("claim = %+v, want a takeover resuming at position 30", claimed)
	}
	// The lease had expired by the database clock when it was claimed.
	var claimedAt time.Time
	if err := e.db.QueryRow(`SELECT claimed_at FROM baton.tasks WHERE partition_key = 'k'`).Scan(&claimedAt); err != nil {
		t.Fatal(err)
	}
	if claimedAt.Before(expiry) {
		t.Fatalf("taken over at %s, before the old lease expired at %s", claimedAt, expiry)
	}
	if err := waitDone(t, d, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	// Confirmation came before the first batch of the new owner.
	var order []distributor.EventKind
	for _, x := range ev.snapshot() {
		if x.Key == "k" && (x.Kind == distributor.EventConfirmed || x.Kind == distributor.EventCheckpoint) {
			order = append(order, x.Kind)
		}
	}
	if len(order) < 2 || order[0] != distributor.EventConfirmed {
		t.Fatalf("events for k = %v, want confirmed before any checkpoint", order)
	}
	e.verify()
	// The history shows the takeover from the ghost, the heir's first batch
	// with the time since the ghost's last heartbeat (at least its lease),
	// and the release once caught up.
	hist, err := partition.NewStore(e.db, "").History(ctx, "k", 20)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for i := len(hist) - 1; i >= 0; i-- {
		kinds = append(kinds, string(hist[i].Kind))
	}
	if want := []string{"claimed", "takeover", "first_batch", "released"}; !slices.Equal(kinds, want) {
		t.Fatalf("history of k = %v, want %v", kinds, want)
	}
	if to := hist[2]; to.PrevOwner != g.id || to.Worker != d.InstanceID() {
		t.Fatalf("takeover event %+v: want from %s by %s", to, g.id, d.InstanceID())
	}
	if fb := hist[1]; fb.TakeoverTime == nil || *fb.TakeoverTime < 300*time.Millisecond || *fb.Position <= 30 {
		t.Fatalf("first batch event %+v: want a takeover time of at least the 300ms lease, past position 30", fb)
	}
	if hist[0].Detail != "caught_up" {
		t.Fatalf("release event %+v: want reason caught_up", hist[0])
	}
	var byGhost, byHeir int
	if err := e.db.QueryRow(`SELECT count(*) FILTER (WHERE owner = ?), count(*) FILTER (WHERE owner <> ?)
		FROM test_output`, g.id, g.id).Scan(&byGhost, &byHeir); err != nil {
		t.Fatal(err)
	}
	if byGhost != 30 || byHeir != 70 {
		t.Fatalf("ghost wrote %d, heir %d; want 30 and 70", byGhost, byHeir)
	}

	// The ghost wakes up and tries to commit under its old claim.
	e.addWork(10, "k")
	err = g.commitBatch(ctx, 5)
	if !errors.Is(err, partition.ErrFenced) {
		t.Fatalf("late commit by the old owner = %v, want ErrFenced", err)
	}
	var n int
	if err := e.db.QueryRow(`SELECT count(*) FROM test_output WHERE key = 'k'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 100 {
		t.Fatalf("%d outputs after the fenced commit, want 100 (nothing written)", n)
	}
}

// Stopping a worker gracefully releases its partitions, and another worker
// takes them over at once: no lease expiry, no confirmation wait.
func TestGracefulReleaseLetsAnotherStartAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addWork(100000, "big")
	evA, evB := newEvents(), newEvents()
	cfgA := fastConfig("a", evA)
	cfgA.StaleAfter = 30 * time.Second // a takeover by expiry would take far longer than the test allows
	a := e.start(cfgA, newProc())
	evA.wait(t, 10*time.Second, "a's first checkpoint", kind(distributor.EventCheckpoint))

	cfgB := fastConfig("b", evB)
	cfgB.StaleAfter = 30 * time.Second
	cfgB.Confirm = 50 // 2.5s of heartbeats if it had to confirm
	e.start(cfgB, newProc())

	stopped := time.Now()
	a.Stop()
	rel := evA.wait(t, 5*time.Second, "a's release", kind(distributor.EventReleased))
	if rel.Reason != "shutdown" {
		t.Fatalf("release reason %q, want shutdown", rel.Reason)
	}
	claim := evB.wait(t, 10*time.Second, "b's claim", kind(distributor.EventClaimed))
	if claim.Takeover {
		t.Fatalf("b's claim of a released partition was a takeover; it needs no confirmation")
	}
	evB.wait(t, 10*time.Second, "b's first checkpoint", kind(distributor.EventCheckpoint))
	if n := evB.count(kind(distributor.EventConfirmed)); n != 0 {
		t.Fatalf("b waited for confirmation %d times", n)
	}
	t.Logf("graceful handoff: first batch by the next worker %s after stop began", time.Since(stopped))
}

// When a worker stops gracefully, the others take its partitions at once
// even though they were at their fair share: it leaves the live count
// before releasing, and the release notifications make them recompute the
// share. RebalanceInterval is an hour, so nothing else could.
func TestGracefulLeaveRaisesOthersShareAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	evs := map[string]*events{}
	ds := map[string]*distributor.Distributor{}
	for _, name := range []string{"x", "y", "z"} {
		evs[name] = newEvents()
		cfg := fastConfig(name, evs[name])
		cfg.MaxPartitions = 12
		cfg.RebalanceInterval = time.Hour
		cfg.PollInterval = 100 * time.Millisecond // picks up claim races lost at the start
		// Shares, not leases, are under test: a lease long enough that a
		// loaded machine's late heartbeats and slow batches (statements
		// time out at StaleAfter/2) cost no partition.
		cfg.StaleAfter = 5 * time.Second
		ds[name] = e.start(cfg, newProc())
	}
	// The work arrives after all three registered: the notification makes
	// each compute a share of 4.
	e.addWork(1_000_000, keys("g", 12)...)
	waitHeld := func(what string, want map[string]int) {
		t.Helper()
		// The task table offers no notification: poll it.
		testutil.Eventually(t, 10*time.Second, what, func() error {
			if held := e.heldBy(); !maps.Equal(held, want) {
				return fmt.Errorf("held %v, want %v", held, want)
			}
			return nil
		})
	}
	waitHeld("shares at start", map[string]int{"x": 4, "y": 4, "z": 4})

	ds["z"].Stop()
	waitHeld("after z left", map[string]int{"x": 6, "y": 6})
	for _, name := range []string{"x", "y"} {
		if n := evs[name].count(kind(distributor.EventLost)); n != 0 {
			t.Errorf("%s lost %d partitions; want none", name, n)
		}
	}
}

// A graceful leave announces itself: the survivor recomputes its share on
// the announcement, at once, and claims the partitions released right
// after. A survivor that recomputed moments before (here: at its start)
// must not wait for the once-a-heartbeat limit that guards against floods
// of work notifications; with a 30 s heartbeat that wait is what would
// show.
func TestGracefulLeaveIsNotRateLimited(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addWork(1_000_000, keys("r", 8)...)
	evs := map[string]*events{}
	ds := map[string]*distributor.Distributor{}
	for _, name := range []string{"x", "y"} {
		evs[name] = newEvents()
		cfg := fastConfig(name, evs[name])
		cfg.Heartbeat, cfg.StaleAfter = 30*time.Second, 2*time.Minute
		cfg.RebalanceInterval = time.Hour
		cfg.PollInterval = time.Hour // only notifications wake the claim loop
		cfg.MaxPartitions = 8
		if name == "x" {
			// Alone at its start, x's share is all 8: cap it at 4 so y
			// finds the other 4.
			cfg.MaxPartitions = 4
		}
		ds[name] = e.start(cfg, newProc())
		evs[name].wait(t, 10*time.Second, name+" claims", kind(distributor.EventClaimed))
		if name == "x" {
			// x takes its 4 before y starts: claims the two raced for
			// would be skipped by the loser until its next poll, which
			// this test puts an hour away.
			testutil.Eventually(t, 10*time.Second, "x at its limit", func() error {
				if held := e.heldBy(); held["x"] != 4 {
					return fmt.Errorf("held %v, want x:4", held)
				}
				return nil
			})
		}
	}
	testutil.Eventually(t, 10*time.Second, "shares at start", func() error {
		if held := e.heldBy(); !maps.Equal(held, map[string]int{"x": 4, "y": 4}) {
			return fmt.Errorf("held %v, want x:4 y:4", held)
		}
		return nil
	})
	ds["x"].Stop()
	testutil.Eventually(t, 10*time.Second, "y holds everything after x left", func() error {
		if held := e.heldBy(); !maps.Equal(held, map[string]int{"y": 8}) {
			return fmt.Errorf("held %v, want y:8", held)
		}
		return nil
	})
}

func TestLeaderKeepsPartitionsAndPicksUpNewWork(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addWork(20, keys("l", 3)...)
	ev := newEvents()
	cfg := fastConfig("leader", ev)
	cfg.Mode = distributor.ModeLeader
	d := e.start(cfg, newProc())
	for i := 0; i < 3; i++ {
		ev.wait(t, 10*time.Second, "checkpoints to position 20", func(x distributor.Event) bool {
			return x.Kind == distributor.EventCheckpoint && x.Key == keys("l", 3)[i] && x.Position == 20
		})
	}
	e.addWork(15, "l001")
	ev.wait(t, 10*time.Second, "new work processed", func(x distributor.Event) bool {
		return x.Kind == distributor.EventCheckpoint && x.Key == "l001" && x.Position == 35
	})
	if n := ev.count(kind(distributor.EventReleased)); n != 0 {
		t.Fatalf("leader released %d partitions, want to keep them", n)
	}
	if n := ev.count(kind(distributor.EventClaimed)); n != 3 {
		t.Fatalf("leader claimed %d times, want 3 (claims kept across new work)", n)
	}
	d.Stop()
	e.verify()
}

// In lock mode, records arriving for a caught-up, released partition make
// it claimable again, and the notification wakes a worker promptly.
func TestLockModeNewWorkOnCaughtUpPartition(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addWork(5, "p")
	ev := newEvents()
	cfg := fastConfig("w", ev)
	cfg.PollInterval = time.Hour // only a notification can wake it
	e.start(cfg, newProc())
	ev.wait(t, 10*time.Second, "release after catching up", kind(distributor.EventReleased))
	e.addWork(7, "p")
	ev.wait(t, 10*time.Second, "the new work processed", func(x distributor.Event) bool {
		return x.Kind == distributor.EventCheckpoint && x.Position == 12
	})
	e.verify()
}

// A claim round that fails (here: the task table is locked past the
// round's timeout) is retried after a backoff, not left to the next poll.
func TestFailedClaimRoundIsRetried(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ev := newEvents()
	cfg := fastConfig("w", ev)
	cfg.PollInterval = time.Hour // no poll can rescue it
	e.start(cfg, newProc())
	// Once listening, the worker has looked for work once and found none.
	pgtest.WaitForStatement(t, e.db.DB, "LISTEN ")

	ctx := context.Background()
	tx, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `LOCK TABLE baton.tasks IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	// Wake the worker into a claim round that cannot finish.
	if _, err := e.db.ExecContext(ctx, `SELECT pg_notify('baton_work', '')`); err != nil {
		t.Fatal(err)
	}
	// Rounds already under way (the start, the wake once listening, the
	// notification) fail at most three times; a fourth failure is a retry.
	failed := 0
	ev.wait(t, 20*time.Second, "a fourth failed claim round", func(x distributor.Event) bool {
		if x.Kind == distributor.EventClaimRoundFailed {
			failed++
		}
		return failed == 4
	})
	// The work appears without a notification: only a retry finds it.
	if _, err := tx.ExecContext(ctx, `INSERT INTO baton.tasks (partition_key, available) VALUES ('p', 5)`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	ev.wait(t, 10*time.Second, "the partition claimed and caught up", kind(distributor.EventReleased))
	e.verify()
}

// Start fails with an error, instead of hanging, when the database cannot
// register the worker.
func TestStartFailsWhenRegistrationBlocks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	tx, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `LOCK TABLE baton.tasks IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	db := pgtest.OpenDB(t, e.dsn, dbconn.Options{MaxOpenConns: 8})
	d, err := distributor.New(db, newProc(), fastConfig("w", newEvents()))
	if err != nil {
		t.Fatal(err)
	}
	err = d.Start(ctx)
	if err == nil {
		d.Stop()
		t.Fatal("Start succeeded while the task table was locked")
	}
	if !strings.Contains(err.Error(), "registering worker") || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start error = %v; want registering worker ... deadline exceeded", err)
	}
}

func TestThreeWorkersShareThirtyPartitionsFairly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addWork(100000, keys("f", 30)...)
	p := busyProc() // simulated work so partitions stay busy while shares settle
	evs := []*events{newEvents(), newEvents(), newEvents()}
	var ds []*distributor.Distributor
	for i, name := range []string{"x", "y", "z"} {
		cfg := fastConfig(name, evs[i])
		cfg.MaxPartitions = 30
		cfg.RebalanceInterval = 100 * time.Millisecond
		ds = append(ds, e.start(cfg, p))
		if i == 0 {
			// The first worker alone takes everything...
			for n := 0; n < 30; n++ {
				evs[0].wait(t, 10*time.Second, "x claims all 30", func(x distributor.Event) bool {
					return x.Kind == distributor.EventClaimed && x.Key == keys("f", 30)[n]
				})
			}
		}
	}
	// ...and hands back its surplus until each holds 10.
	testutil.Eventually(t, 20*time.Second, "shares settle at 10/10/10", func() error {
		if held := e.heldBy(); held["x"] != 10 || held["y"] != 10 || held["z"] != 10 {
			return fmt.Errorf("held %v", held)
		}
		return nil
	})
	// x gave up its surplus cooperatively, and never more than it (no
	// churn). On a loaded machine some may instead have been lost (lease
	// expiry, a release or batch that timed out); together they account
	// for the 20.
	// x's own account of a loss may trail the database by a moment.
	var handedBack, lost, reclaimed int
	accounted := time.After(testutil.WaitTimeout(10 * time.Second))
	for waiting := true; waiting; {
		changed := evs[0].changed()
		handedBack = evs[0].count(func(x distributor.Event) bool {
			return x.Kind == distributor.EventReleased && x.Reason == "rebalance"
		})
		lost = evs[0].count(func(x distributor.Event) bool {
			return x.Kind == distributor.EventLost || x.Kind == distributor.EventFenced || x.Kind == distributor.EventFailed
		})
		reclaimed = evs[0].count(kind(distributor.EventClaimed)) - 30
		if handedBack+lost >= 20 {
			break
		}
		select {
		case <-changed:
		case <-accounted:
			waiting = false
		}
	}
	// A lease lost (a starved machine) may come back to x and be handed
	// back once more. So may a partition x handed back: when another
	// worker's heartbeats stall beyond StaleAfter, x counts one live
	// worker fewer, its share grows, and it claims back what nobody has
	// claimed yet, to hand it back once the heartbeats resume. No more
	// hand-backs than those: each one beyond the 20 answers a claim x
	// made after its first 30 or a loss.
	if handedBack == 0 || handedBack > 20+lost+reclaimed || handedBack+lost < 20 {
		t.Errorf("x handed back %d partitions, lost %d and claimed %d after its first 30; want 1–20 handed back (plus one per loss or later claim), 20 in all; x's events:\n%s",
			handedBack, lost, reclaimed, evs[0].dump(func(x distributor.Event) bool { return x.Kind != distributor.EventCheckpoint }))
	}
	for _, d := range ds {
		d.Stop()
	}
}

func TestPoisonPartitionQuarantinedAndRetryRevives(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addWork(25, "good1", "bad", "good2")
	var poisoned atomic.Bool
	poisoned.Store(true)
	p := newProc()
	p.before = func(ctx context.Context, b *distributor.Batch) error {
		if b.Lease.Key == "bad" && poisoned.Load() {
			return errors.New("record 3 is malformed")
		}
		return nil
	}
	ev := newEvents()
	cfg := fastConfig("w", ev)
	cfg.UntilDone = true
	cfg.MaxAttempts = 3
	d := e.start(cfg, p)
	err := waitDone(t, d, 30*time.Second)
	if !errors.Is(err, distributor.ErrIncomplete) {
		t.Fatalf("until-done with a poison partition = %v, want ErrIncomplete", err)
	}
	var ie *distributor.IncompleteError
	if !errors.As(err, &ie) || ie.Quarantined != 1 {
		t.Fatalf("until-done with a poison partition = %#v, want an *IncompleteError with 1 quarantined", err)
	}
	store := taskstore.NewStore(e.db, "")
	parts, _, err := store.Admin().Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range parts {
		switch s.Key {
		case "bad":
			if s.State != partition.StateQuarantined || s.Attempts != 3 || !strings.Contains(s.Error, "record 3 is malformed") || s.Processed != 0 {
				t.Fatalf("bad partition status = %+v", s)
			}
		default:
			if s.State != partition.StateDone || s.Processed != 25 {
				t.Fatalf("good partition %s status = %+v (held up by the poison one?)", s.Key, s)
			}
		}
	}
	if n := ev.count(kind(distributor.EventFailed)); n != 2 {
		t.Errorf("%d back-off failures, want 2 before quarantine", n)
	}

	poisoned.Store(false)
	if changed, err := store.Admin().Retry(context.Background(), "bad"); err != nil || !changed {
		t.Fatalf("retry = %v, %v", changed, err)
	}
	if _, err := store.Admin().Retry(context.Background(), "nope"); !errors.Is(err, partition.ErrNotFound) {
		t.Fatalf("retry of unknown partition = %v, want ErrNotFound", err)
	}
	d2 := e.start(cfg, p)
	if err := waitDone(t, d2, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	e.verify()
}

// Killing the worker's database connections mid-run (as a network blip or
// a server-side termination would) costs neither correctness nor the run.
func TestLostConnectionsRecover(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addWork(400, keys("n", 6)...)
	p := newProc()
	var killed atomic.Bool
	p.before = func(ctx context.Context, b *distributor.Batch) error {
		if b.Checkpoint.Position >= 100 && killed.CompareAndSwap(false, true) {
			// Terminate every connection of this worker, including the one
			// running this batch.
			if _, err := e.db.Exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE application_name = 'lossy' AND pid <> pg_backend_pid()`); err != nil {
				return err
			}
		}
		return nil
	}
	ev := newEvents()
	cfg := fastConfig("lossy", ev)
	cfg.UntilDone = true
	cfg.StaleAfter = 2 * time.Second
	db := openNamed(t, e.dsn, "lossy", cfg.MaxPartitions+4)
	d, err := distributor.New(db, p, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !killed.Load() {
		t.Fatal("connections were never killed")
	}
	e.verify()
	if n := ev.count(kind(distributor.EventQuarantined)); n != 0 {
		t.Fatalf("%d partitions quarantined by a connection loss", n)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	bad := map[string]distributor.Config{
		"stale not above heartbeat": {Heartbeat: time.Second, StaleAfter: 2 * time.Second},
		"until-done leader":         {Mode: distributor.ModeLeader, UntilDone: true},
		"unknown mode":              {Mode: "chaos"},
		"name with separator":       {Name: "a#b"},
		"negative batch":            {BatchSize: -1},
		"negative batch target":     {BatchTarget: -time.Second},
		"batch target over lease/4": {BatchTarget: 3 * time.Second},
		"margin too large":          {Heartbeat: time.Second, StaleAfter: 4 * time.Second, SafetyMargin: 3 * time.Second},
		"backoff above max":         {Backoff: time.Hour, MaxBackoff: time.Minute},
	}
	for name, cfg := range bad {
		if err := cfg.Validate(); err == nil {
			t.Errorf("%s: Validate() = nil, want an error", name)
		}
	}
	if err := (distributor.Config{}).Validate(); err != nil {
		t.Errorf("defaults rejected: %v", err)
	}
}

func TestStopLeaksNoGoroutines(t *testing.T) {
	e := newEnv(t)
	e.addWork(30, keys("g", 4)...)
	ev := newEvents()
	cfg := fastConfig("tidy", ev)
	db := openNamed(t, e.dsn, "tidy", 12)
	before := goleak.IgnoreCurrent()
	d, err := distributor.New(db, newProc(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ev.wait(t, 10*time.Second, "a checkpoint", kind(distributor.EventCheckpoint))
	d.Stop()
	db.Close()
	goleak.VerifyNone(t, before, goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"))
}

// The embedding shown in Example works against a real database: a
// ProcessorFunc writing through the fenced transaction.
func TestEmbeddingWithProcessorFunc(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.db.Exec(`CREATE TABLE invoices (account text, item bigint, PRIMARY KEY (account, item))`); err != nil {
		t.Fatal(err)
	}
	e.addWork(42, "acct-1", "acct-2")
	process := distributor.ProcessorFunc(func(ctx context.Context, b *distributor.Batch) (distributor.Result, error) {
		from, to := b.Checkpoint.Position+1, b.Checkpoint.Position+int64(b.Limit)
		if _, err := b.Tx.ExecContext(ctx, `INSERT INTO invoices (account, item) SELECT ?, generate_series(?::bigint, ?::bigint)`,
			b.Lease.Key, from, to); err != nil {
			return distributor.Result{}, err
		}
		return distributor.Result{Position: to}, nil
	})
	cfg := fastConfig("invoicer", newEvents())
	cfg.UntilDone = true
	d := e.start(cfg, process)
	if err := waitDone(t, d, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := e.db.QueryRow(`SELECT count(*) FROM invoices`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 84 {
		t.Fatalf("%d invoices, want 84", n)
	}
}

// An owner frozen in the middle of a batch transaction (SIGSTOP, VM pause)
// holds the fence's row lock. The server's idle-in-transaction timeout,
// which workers set below the lease, ends its session so the takeover goes
// ahead; when the owner resumes, its commit fails.
func TestOwnerFrozenMidTransactionCannotBlockOrCommit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addWork(50, "frozen")
	ctx := context.Background()
	g := claimAsGhost(t, e, "frozen", 300*time.Millisecond)
	gdb := pgtest.Open(t, e.dsn, dbconn.Options{IdleInTransactionTimeout: 500 * time.Millisecond, MaxOpenConns: 2})
	tx, err := gdb.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	cp, err := taskstore.NewStore(gdb, "").Fence(ctx, tx, g.id, g.lease)
	if err != nil {
		t.Fatal(err)
	}
	// ...and the ghost freezes here, holding the row lock.
	ev := newEvents()
	cfg := fastConfig("heir", ev)
	cfg.UntilDone = true
	d := e.start(cfg, newProc())
	claim := ev.wait(t, 15*time.Second, "takeover despite the frozen transaction", kind(distributor.EventClaimed))
	if !claim.Takeover {
		t.Fatalf("claim %+v is not a takeover", claim)
	}
	if err := waitDone(t, d, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	// The ghost resumes and finishes its batch.
	res, perr := newProc().Process(ctx, &distributor.Batch{Lease: g.lease, Owner: g.id, Tx: tx, Checkpoint: cp, Limit: 10})
	if perr == nil {
		perr = taskstore.NewStore(gdb, "").Advance(ctx, tx, g.lease, cp.Position, res.Position, res.State)
	}
	if perr == nil {
		perr = tx.Commit()
	}
	if perr == nil {
		t.Fatal("the frozen owner's batch committed after a takeover")
	}
	e.verify()
}

// A leader holding its maximum of caught-up partitions hands idle ones back
// when other partitions have work that nobody can claim.
func TestLeaderAtCapacityMakesRoomForWaitingWork(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addWork(5, "a", "b")
	ev := newEvents()
	cfg := fastConfig("leader", ev)
	cfg.Mode = distributor.ModeLeader
	cfg.MaxPartitions = 2
	cfg.RebalanceInterval = 100 * time.Millisecond
	d := e.start(cfg, newProc())
	for _, k := range []string{"a", "b"} {
		ev.wait(t, 10*time.Second, k+" caught up", func(x distributor.Event) bool {
			return x.Kind == distributor.EventCheckpoint && x.Key == k && x.Position == 5
		})
	}
	e.addWork(7, "c")
	ev.wait(t, 10*time.Second, "c processed by the full leader", func(x distributor.Event) bool {
		return x.Kind == distributor.EventCheckpoint && x.Key == "c" && x.Position == 7
	})
	d.Stop()
	e.verify()
}

// When a worker dies while every survivor is at its fair share, the
// survivors still take its partitions once its registration and their
// leases have ended: a takeover never waits for a rebalance (an hour here)
// or for a survivor below its share. The dead worker counts as live until
// the survivors have settled at the share it gave them, and only then does
// its registration end (its leases ended long before): the share in hand
// is the one that counted it.
func TestTakeoverDoesNotWaitForFairShare(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	all := keys("s", 9)
	e.addWork(1_000_000, all...)
	ctx := context.Background()
	dead := taskstore.NewStore(e.db, "")
	if _, err := dead.HeartbeatBelow(ctx, taskstore.Worker{InstanceID: "ghost#0001", Name: "ghost"}, time.Hour, time.Hour+time.Hour, nil); err != nil {
		t.Fatal(err)
	}
	var ghostKeys []string
	for _, k := range all[:3] {
		g := claimAsGhost(t, e, k, 500*time.Millisecond)
		ghostKeys = append(ghostKeys, g.lease.Key)
	}

	ev := newEvents() // both survivors' events, told apart by Worker
	for _, name := range []string{"x", "y"} {
		cfg := fastConfig(name, ev)
		cfg.MaxPartitions = 8
		cfg.RebalanceInterval = time.Hour
		e.start(cfg, newProc())
	}
	// Three live workers (the ghost among them) and nine busy partitions:
	// a share of 3 each. The ghost's leases expire while x and y are at it;
	// once x and y hold the other six, the ghost's registration ends too
	// (as a dead worker's does, a lease's length after its last heartbeat).
	testutil.Eventually(t, 20*time.Second, "x and y holding the six others", func() error {
		if held := e.heldBy(); held["x"]+held["y"] != 6 {
			return fmt.Errorf("held %v", held)
		}
		return nil
	})
	if _, err := e.db.ExecContext(ctx, `UPDATE baton.workers SET expires_at = now() - interval '1 millisecond' WHERE instance_id = 'ghost#0001'`); err != nil {
		t.Fatal(err)
	}
	for _, k := range ghostKeys {
		c := ev.wait(t, 20*time.Second, "takeover of "+k+" confirmed", func(x distributor.Event) bool {
			return x.Kind == distributor.EventConfirmed && x.Key == k
		})
		t.Logf("%s taken over by %s", k, c.Worker)
	}
	// And they keep them: the ghost, dead and holding nothing, wants
	// nothing, so nothing is handed back to it to sit unclaimed. (Between
	// x and y a hand-back is fair when one started before the other; on a
	// starved machine a lease may run out and be taken again: the test
	// waits for the state, not for a moment.)
	testutil.Eventually(t, 20*time.Second, "all 9 partitions with x and y", func() error {
		if held := e.heldBy(); held["x"]+held["y"] != 9 || held["ghost"] != 0 {
			return fmt.Errorf("held %v", held)
		}
		return nil
	})
}

// In lock mode the batch that catches up releases its partition in its own
// transaction: output, checkpoint and release share one commit (the task
// row's xmin is the output rows'). Work that a producer adds while that
// batch runs is not lost: the release sees it, notifies, and the partition
// is claimed again.
func TestCaughtUpBatchReleasesInItsCommit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addWork(5, "tiny", "late")
	ev := newEvents()
	cfg := fastConfig("solo", ev)
	cfg.UntilDone = true
	p := newProc()
	var once sync.Once
	p.before = func(ctx context.Context, b *distributor.Batch) error {
		if b.Lease.Key == "late" {
			once.Do(func() { e.addWork(3, "late") })
		}
		return nil
	}
	d := e.start(cfg, p)
	if err := waitDone(t, d, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	e.verify()
	var same bool
	var version int64
	var owner *string
	if err := e.db.QueryRow(`
		SELECT bool_and(t.xmin::text = o.xmin::text), max(t.version), max(t.owner)
		FROM baton.tasks t JOIN test_output o ON o.key = t.partition_key
		WHERE t.partition_key = 'tiny'`).Scan(&same, &version, &owner); err != nil {
		t.Fatal(err)
	}
	if !same || version != 2 || owner != nil {
		t.Fatalf("tiny: output and release in one transaction %v, version %d (want 2: claim, release), owner %v", same, version, owner)
	}
	var kinds []distributor.EventKind
	for _, x := range ev.snapshot() {
		if x.Key == "tiny" {
			kinds = append(kinds, x.Kind)
		}
	}
	want := []distributor.EventKind{distributor.EventClaimed, distributor.EventCheckpoint, distributor.EventReleased}
	if !slices.Equal(kinds, want) {
		t.Fatalf("events of tiny: %v, want %v", kinds, want)
	}
	p.mu.Lock()
	got := p.batches["late"]
	p.mu.Unlock()
	if got != 2 {
		t.Fatalf("late: %d batches, want 2 (the work added during the first is claimed again)\n%s", got, ev.dump())
	}
}

// A live worker that cannot take its share (its own MaxPartitions is
// smaller) must not leave work waiting: the others take the rest beyond
// their shares once nobody wants it, and keep it.
func TestWorkNobodyWantsIsClaimedBeyondTheShare(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	all := keys("h", 30)
	e.addWork(1_000_000, all...)
	ev := newEvents()
	for _, w := range []struct {
		name string
		max  int
	}{{"small", 1}, {"x", 30}, {"y", 30}} {
		cfg := fastConfig(w.name, ev)
		cfg.MaxPartitions = w.max
		cfg.RebalanceInterval = 200 * time.Millisecond
		e.start(cfg, newProc())
	}
	// Three live workers and 30 busy partitions: a share of 10 each, but
	// "small" holds 1 at most; x and y take the 9 left over.
	testutil.Eventually(t, 20*time.Second, "all 30 partitions held", func() error {
		held := e.heldBy()
		if n := held["small"] + held["x"] + held["y"]; n != 30 || held["small"] != 1 {
			return fmt.Errorf("held %v", held)
		}
		return nil
	})
}

// A dead worker's partitions (started, interrupted, lease run out) are
// claimed before partitions nobody has started: a busy survivor takes them
// at its next free slots, not after every fresh partition.
//
// The worker's two slots are held by fresh partitions stopped in their
// first batch while the dead worker's leases are ended, so no claim round
// can read the candidates in between (a worker with no room reads none):
// every round after the gate opens reads them with the leases run out, and
// the first two slots that free must go to the dead worker's partitions.
func TestStalePartitionsAreClaimedBeforeFreshOnes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addWork(30, "dead0", "dead1")
	var ghosts []*ghost
	// Leases that outlast the worker's start however slow the machine; the
	// test ends them (below) once the worker's slots are held.
	for _, k := range []string{"dead0", "dead1"} {
		ghosts = append(ghosts, claimAsGhost(t, e, k, time.Hour))
	}
	fresh := keys("new", 40)
	e.addWork(30, fresh...)
	ev := newEvents()
	// One log of both fresh partitions' first batches and claims, in the
	// order they happened.
	var (
		mu    sync.Mutex
		order []string
	)
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	cfg := fastConfig("x", ev)
	cfg.OnEvent = func(x distributor.Event) {
		if x.Kind == distributor.EventClaimed && strings.HasPrefix(x.Key, "dead") {
			note("claimed " + x.Key)
		}
		ev.add(x)
	}
	cfg.MaxPartitions, cfg.ClaimGroup = 2, 1
	gate, held := make(chan struct{}), make(chan string, 2)
	var first sync.Map
	p := newProc()
	p.before = func(ctx context.Context, b *distributor.Batch) error {
		if _, again := first.LoadOrStore(b.Lease.Key, true); again || !strings.HasPrefix(b.Lease.Key, "new") {
			return nil
		}
		select {
		case <-gate:
			note("started " + b.Lease.Key)
			return nil
		default:
		}
		held <- b.Lease.Key // the first two hold the slots until the gate opens
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	e.start(cfg, p)
	for range 2 {
		select {
		case <-held:
		case <-time.After(testutil.WaitTimeout(20 * time.Second)):
			t.Fatal("the worker's two slots were not taken by fresh partitions")
		}
	}
	if _, err := e.db.Exec(`UPDATE baton.tasks SET lease_expires_at = now() WHERE partition_key IN ('dead0', 'dead1')`); err != nil {
		t.Fatal(err)
	}
	close(gate)
	for _, g := range ghosts {
		ev.wait(t, 20*time.Second, "takeover of "+g.lease.Key, func(x distributor.Event) bool {
			return x.Kind == distributor.EventClaimed && x.Key == g.lease.Key
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if len(order) < 2 || !strings.HasPrefix(order[0], "claimed dead") || !strings.HasPrefix(order[1], "claimed dead") {
		t.Fatalf("after the dead worker's leases ran out, the slots went to %v; want its two partitions first\n%s",
			order, ev.dump(kind(distributor.EventClaimed)))
	}
}
