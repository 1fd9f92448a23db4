package distributor_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
	"github.com/uptrace/bun"
)

// groupProc is the test processor with groups: each member is processed
// as proc.Process would alone, in the group's transaction.
type groupProc struct {
	*proc
	mu          sync.Mutex
	sizes       []int
	beforeGroup func(ctx context.Context, g *distributor.Group) error
}

func newGroupProc() *groupProc { return &groupProc{proc: newProc()} }

func (p *groupProc) ProcessGroup(ctx context.Context, g *distributor.Group) ([]distributor.Result, error) {
	p.mu.Lock()
	p.sizes = append(p.sizes, len(g.Batches))
	p.mu.Unlock()
	if p.beforeGroup != nil {
		if err := p.beforeGroup(ctx, g); err != nil {
			return nil, err
		}
	}
	out := make([]distributor.Result, len(g.Batches))
	for i, b := range g.Batches {
		if b.Tx != g.Tx || b.Owner != g.Owner {
			return nil, errors.New("a member's batch is not the group's transaction")
		}
		res, err := p.Process(ctx, b)
		if err != nil {
			return nil, err
		}
		out[i] = res
	}
	return out, nil
}

// groupSizes are the sizes of the groups processed so far, in order.
func (p *groupProc) groupSizes() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.sizes)
}

// fenceElsewhere opens another worker's claim transaction fenced on the
// candidate key, left open: the caller rolls it back (deferred, so that it
// ends before the test's workers are stopped).
func (e *env) fenceElsewhere(key string) bun.Tx {
	e.t.Helper()
	s := taskstore.NewStore(e.db, "")
	ctx := context.Background()
	cands, err := s.Candidates(ctx, 10)
	if err != nil {
		e.t.Fatal(err)
	}
	i := slices.IndexFunc(cands, func(c taskstore.Candidate) bool { return c.Key == key })
	if i < 0 {
		e.t.Fatalf("candidates %v lack %s", cands, key)
	}
	other, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if fenced, err := s.FenceUnownedGroup(ctx, other, cands[i:i+1], 1); err != nil || len(fenced) != 1 {
		_ = other.Rollback()
		e.t.Fatalf("fencing %s from another transaction: %d fenced, %v", cands[i].Key, len(fenced), err)
	}
	return other
}

// waitReleased waits for n release events.
func waitReleased(t *testing.T, ev *events, n int) {
	t.Helper()
	released := 0
	ev.wait(t, 20*time.Second, fmt.Sprintf("%d partitions released", n), func(x distributor.Event) bool {
		if x.Kind == distributor.EventReleased {
			released++
		}
		return released == n
	})
}

// largestGroup is the most claims committed by one transaction.
func (e *env) largestGroup() int {
	e.t.Helper()
	var n int
	if err := e.db.QueryRow(`SELECT coalesce(max(c), 0) FROM (
		SELECT count(*) AS c FROM baton.events WHERE kind = 'claimed' GROUP BY xmin::text) g`).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// wantHistory fails unless every key's history is want.
func (e *env) wantHistory(keys []string, want ...string) {
	e.t.Helper()
	for _, k := range keys {
		if got := e.history(k); !slices.Equal(got, want) {
			e.t.Fatalf("%s: history %v, want %v", k, got, want)
		}
	}
}

// One-item partitions are claimed, processed and released in groups: each
// claimed once, in one transaction with its output, checkpoint and release
// (lock mode), several per transaction.
func TestClaimGroupClaimsProcessesAndReleasesTogether(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 40
	e.addWork(1, keys("g", n)...)
	ev := newEvents()
	cfg := groupConfig("w", ev)
	p := newGroupProc()
	d := e.start(cfg, p)
	if err := waitDone(t, d, 30*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, ev.dump())
	}
	e.verify()
	e.wantHistory(keys("g", n), "claimed@1", "first_batch@1", "released@1")
	if bad := e.notInOneTransaction(); bad != 0 {
		t.Fatalf("%d partitions not claimed, processed and released in one transaction", bad)
	}
	if g := e.largestGroup(); g < 2 || g > cfg.ClaimGroup {
		t.Fatalf("largest group %d; want several, at most ClaimGroup (%d)", g, cfg.ClaimGroup)
	}
	if c, r := ev.count(kind(distributor.EventClaimed)), ev.count(kind(distributor.EventReleased)); c != n || r != n {
		t.Fatalf("%d claims and %d releases reported, want %d each", c, r, n)
	}
	if w := e.heldBy(); len(w) != 0 {
		t.Fatalf("held counts %v after every partition was released; want none", w)
	}
}

// Members with more work than one batch carry on after the group's
// commit as held partitions, renewed by heartbeats, until caught up.
func TestClaimGroupMembersNotCaughtUpAreHeld(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 6
	e.addWork(25, keys("h", n)...) // BatchSize 10: three batches each
	ev := newEvents()
	cfg := groupConfig("w", ev)
	p := newGroupProc()
	d := e.start(cfg, p)
	if err := waitDone(t, d, 30*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, ev.dump())
	}
	e.verify()
	e.wantHistory(keys("h", n), "claimed@1", "first_batch@1", "released@1")
	if g := e.largestGroup(); g < 2 {
		t.Fatalf("largest group %d; want several", g)
	}
	p.proc.mu.Lock()
	defer p.proc.mu.Unlock()
	for _, k := range keys("h", n) {
		if b := p.batches[k]; b != 3 {
			t.Fatalf("%s: %d batches, want 3 (one in its group, two held)", k, b)
		}
	}
}

// A candidate another transaction has fenced is dropped from the group
// (not waited for): the others are processed together, and the dropped
// one once its fence is gone.
func TestClaimGroupDropsAMemberLostAtTheFence(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addWork(1, keys("f", 5)...)
	other := e.fenceElsewhere("f002")
	defer func() { _ = other.Rollback() }()
	ev := newEvents()
	cfg := groupConfig("w", ev)
	p := newGroupProc()
	d := e.start(cfg, p)
	ev.wait(t, 20*time.Second, "the lost candidate", kind(distributor.EventClaimLost))
	waitReleased(t, ev, 4)
	if got := e.history("f002"); len(got) != 0 {
		t.Fatalf("f002 has history %v while fenced by another transaction; want none", got)
	}
	if err := other.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := waitDone(t, d, 30*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, ev.dump())
	}
	e.verify()
	e.wantHistory(keys("f", 5), "claimed@1", "first_batch@1", "released@1")
	if sizes := p.groupSizes(); len(sizes) == 0 || sizes[0] != 4 {
		t.Fatalf("group sizes %v; want a first group of 4 (f002 dropped at the fence)", sizes)
	}
}

// A member whose claim is lost after the group was processed (a producer
// holds its row when the claim statement runs) rolls the whole group
// back: no member's output or history survives it; each member is then
// claimed on its own, and every item is processed exactly once.
func TestClaimGroupLostAfterProcessingRollsBackAndFallsBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addWork(1, keys("c", 4)...)
	ctx := context.Background()
	producer, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = producer.Rollback() }()
	var once atomic.Bool
	p := newGroupProc()
	p.beforeGroup = func(ctx context.Context, g *distributor.Group) error {
		if !once.CompareAndSwap(false, true) {
			return nil
		}
		// More work for c001, added in a transaction left open: its row
		// lock (FOR NO KEY UPDATE) does not conflict with the group's
		// fence, but the claim statement skips the row it locks.
		_, err := partition.NewStore(e.db, "").AddWorksTx(ctx, producer, []partition.Work{{Key: "c001", N: 1}})
		return err
	}
	ev := newEvents()
	cfg := groupConfig("w", ev)
	d := e.start(cfg, p)
	// The group rolls back, the others are claimed alone; c001's lone
	// claim is lost too while the producer holds its row.
	ev.wait(t, 20*time.Second, "c001's lone claim lost", kind(distributor.EventClaimLost))
	if got := e.history("c001"); len(got) != 0 {
		t.Fatalf("c001 has history %v; want none while the producer holds it", got)
	}
	if err := producer.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := waitDone(t, d, 30*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, ev.dump())
	}
	e.verify()
	e.wantHistory([]string{"c000", "c002", "c003"}, "claimed@1", "first_batch@1", "released@1")
	// A lone claim whose compare-and-set meets the producer's lock is
	// tried again at the next poll: if one fenced before the producer
	// committed and claimed after, it processed the items it read and a
	// second claim takes the added one. Either way each claim commits its
	// first batch and release together (e.verify checked every item once).
	got := e.history("c001")
	want1 := []string{"claimed@1", "first_batch@1", "released@1"}
	want2 := append(append([]string{}, want1...), "claimed@3", "first_batch@3", "released@3")
	if !slices.Equal(got, want1) && !slices.Equal(got, want2) {
		t.Fatalf("c001: history %v; want %v, or %v", got, want1, want2)
	}
	// The first group had every partition and rolled back. A later poll
	// may group again partitions whose lone claims did not commit (c001's
	// while the producer held its row, or one that failed on a busy
	// machine), and such a group rolls back too while c001 is held; no
	// group as large as the first committed.
	sizes := p.groupSizes()
	if len(sizes) == 0 || sizes[0] != 4 {
		t.Fatalf("groups processed of sizes %v; want the first of all 4 partitions", sizes)
	}
	if g := e.largestGroup(); g >= sizes[0] {
		t.Fatalf("largest committed group %d; want fewer than the first group's %d (it rolled back, its members claimed alone)", g, sizes[0])
	}
}

// A processor error in a group rolls it back, and each member is claimed
// on its own: the failing partition is recorded as failed (here
// quarantined at once) and the others are processed exactly once.
func TestClaimGroupProcessorErrorFallsBackToEachAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addWork(1, keys("e", 5)...)
	p := newGroupProc()
	var inGroup atomic.Int64
	p.before = func(ctx context.Context, b *distributor.Batch) error {
		if b.Lease.Key == "e003" {
			return errors.New("record 1 is malformed")
		}
		return nil
	}
	p.beforeGroup = func(ctx context.Context, g *distributor.Group) error {
		for _, b := range g.Batches {
			if b.Lease.Key == "e003" {
				inGroup.Add(1)
			}
		}
		return nil
	}
	ev := newEvents()
	cfg := groupConfig("w", ev)
	cfg.MaxAttempts = 1
	d := e.start(cfg, p)
	if err := waitDone(t, d, 30*time.Second); !errors.Is(err, distributor.ErrIncomplete) {
		t.Fatalf("run ended with %v; want %v\n%s", err, distributor.ErrIncomplete, ev.dump())
	}
	if inGroup.Load() == 0 {
		t.Fatal("e003 was never processed in a group")
	}
	e.wantHistory([]string{"e000", "e001", "e002", "e004"}, "claimed@1", "first_batch@1", "released@1")
	var failed []string
	rows, err := e.db.Query(`SELECT partition_key FROM baton.tasks WHERE failed_at IS NOT NULL`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		failed = append(failed, k)
	}
	if !slices.Equal(failed, []string{"e003"}) {
		t.Fatalf("quarantined %v; want [e003]", failed)
	}
	var outputs int
	if err := e.db.QueryRow(`SELECT count(*) FROM test_output WHERE key = 'e003'`).Scan(&outputs); err != nil {
		t.Fatal(err)
	}
	if outputs != 0 {
		t.Fatalf("e003 has %d outputs; want none", outputs)
	}
	if n := ev.count(kind(distributor.EventQuarantined)); n != 1 {
		t.Fatalf("%d quarantine events, want 1:\n%s", n, ev.dump())
	}
}

// Two workers group overlapping candidates: fences never wait, so neither
// blocks the other; every partition is claimed and processed exactly once.
func TestClaimGroupRacingWorkersClaimEachOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 200
	e.addWork(1, keys("r", n)...)
	var ds []*distributor.Distributor
	evs := []*events{newEvents(), newEvents()}
	for i, name := range []string{"a", "b"} {
		cfg := groupConfig(name, evs[i])
		ds = append(ds, e.start(cfg, newGroupProc()))
	}
	for _, d := range ds {
		if err := waitDone(t, d, 60*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	e.verify()
	e.wantHistory(keys("r", n), "claimed@1", "first_batch@1", "released@1")
	claimed := evs[0].count(kind(distributor.EventClaimed)) + evs[1].count(kind(distributor.EventClaimed))
	if claimed != n {
		t.Fatalf("%d claims reported, want %d", claimed, n)
	}
	if g := e.largestGroup(); g < 2 {
		t.Fatalf("largest group %d; want several", g)
	}
	t.Logf("claim races lost: %d", evs[0].count(kind(distributor.EventClaimLost))+evs[1].count(kind(distributor.EventClaimLost)))
}

// In leader mode the members of a group are kept after their first
// batches, caught up or not: owned by the worker, counted in its held
// count, renewed, and woken by new work.
func TestClaimGroupInLeaderModeKeepsItsMembers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 5
	e.addWork(1, keys("k", n)...)
	ev := newEvents()
	cfg := fastConfig("leader", ev)
	cfg.Mode, cfg.MaxPartitions, cfg.ClaimGroup = distributor.ModeLeader, 8, 8
	p := newGroupProc()
	d := e.start(cfg, p)
	for _, k := range keys("k", n) {
		ev.wait(t, 10*time.Second, k+" priced", func(x distributor.Event) bool {
			return x.Kind == distributor.EventCheckpoint && x.Key == k && x.Position == 1
		})
	}
	e.wantHistory(keys("k", n), "claimed@1", "first_batch@1")
	if g := e.largestGroup(); g < 2 {
		t.Fatalf("largest group %d; want several", g)
	}
	var owned int
	if err := e.db.QueryRow(`SELECT count(*) FROM baton.tasks WHERE owner LIKE 'leader#%' AND version = 1`).Scan(&owned); err != nil {
		t.Fatal(err)
	}
	if owned != n {
		t.Fatalf("%d partitions owned by the leader at their claim's version; want %d", owned, n)
	}
	// Raised by the claim statement (kept members), and kept so by
	// heartbeats, which count the worker's leases.
	if got := e.heldBy(); got["leader"] != n {
		t.Fatalf("held counts %v; want leader: %d", got, n)
	}
	e.addWork(2, "k002")
	ev.wait(t, 10*time.Second, "new work on a kept member", func(x distributor.Event) bool {
		return x.Kind == distributor.EventCheckpoint && x.Key == "k002" && x.Position == 3
	})
	if r := ev.count(kind(distributor.EventReleased)); r != 0 {
		t.Fatalf("leader released %d partitions; want to keep them", r)
	}
	d.Stop()
	e.verify()
}

// A group fences spare candidates in place of members another transaction
// holds, so it is as full as the worker's room allows, never fuller. (Each
// partition has more items than a member's bound, so none rides.)
func TestClaimGroupFillsWithSpares(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addWork(11, keys("s", 6)...)
	other := e.fenceElsewhere("s003")
	defer func() { _ = other.Rollback() }()
	ev := newEvents()
	cfg := groupConfig("w", ev)
	cfg.MaxPartitions = 3
	p := newGroupProc()
	d := e.start(cfg, p)
	waitReleased(t, ev, 5)
	if err := other.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := waitDone(t, d, 30*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, ev.dump())
	}
	e.verify()
	e.wantHistory(keys("s", 6), "claimed@1", "first_batch@1", "released@1")
	if sizes := p.groupSizes(); len(sizes) == 0 || sizes[0] != 3 {
		t.Fatalf("group sizes %v; want a first group of 3 (the worker's room, s003's place taken by a spare if it was picked)", sizes)
	}
	if g := e.largestGroup(); g > 3 {
		t.Fatalf("a group of %d committed; want at most MaxPartitions (3)", g)
	}
}
