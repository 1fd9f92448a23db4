package distributor_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/batonhq/baton/distributor"
)

// mostKeptByAClaim is the most partitions one claim transaction kept
// (claimed and not released in the same transaction).
func (e *env) mostKeptByAClaim() int {
	e.t.Helper()
	var n int
	if err := e.db.QueryRow(`SELECT coalesce(max(kept), 0) FROM (
		SELECT count(*) FILTER (WHERE kind = 'claimed') - count(*) FILTER (WHERE kind = 'released') AS kept
		FROM baton.events GROUP BY xmin::text) g`).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// releasedFor counts the release events with reason detail.
func (e *env) releasedFor(detail string) int {
	e.t.Helper()
	var n int
	if err := e.db.QueryRow(`SELECT count(*) FROM baton.events WHERE kind = 'released' AND detail = ?`, detail).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// runRiders runs one worker with room for 2 partitions and claim groups of
// 8 (groupConfig) over n partitions of items each, with p, until done,
// and checks that every item was processed exactly once.
func runRiders(t *testing.T, prefix string, n int, items int64, p *groupProc) (*env, *events, distributor.Config) {
	t.Helper()
	e := newEnv(t)
	e.addWork(items, keys(prefix, n)...)
	ev := newEvents()
	cfg := groupConfig("w", ev)
	cfg.MaxPartitions = 2
	d := e.start(cfg, p)
	if err := waitDone(t, d, 30*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, ev.dump())
	}
	e.verify()
	return e, ev, cfg
}

// Partitions small enough to finish in their first batch ride in claim
// groups beyond the worker's room: groups fill to ClaimGroup while the
// worker has room for 2, and every partition is still claimed, processed
// and released in one transaction, so none is held beyond MaxPartitions.
func TestClaimGroupRidersFillGroupsBeyondTheRoom(t *testing.T) {
	t.Parallel()
	const n = 40
	e, _, cfg := runRiders(t, "r", n, 1, newGroupProc())
	e.wantHistory(keys("r", n), "claimed@1", "first_batch@1", "released@1")
	if bad := e.notInOneTransaction(); bad != 0 {
		t.Fatalf("%d partitions not claimed, processed and released in one transaction", bad)
	}
	if g := e.largestGroup(); g <= cfg.MaxPartitions || g > cfg.ClaimGroup {
		t.Fatalf("largest group %d; want more than MaxPartitions (%d), at most ClaimGroup (%d)", g, cfg.MaxPartitions, cfg.ClaimGroup)
	}
	if r := e.releasedFor("caught_up"); r != n {
		t.Fatalf("%d releases with reason caught_up; want %d", r, n)
	}
}

// A rider its first batch does not catch up (here the group processes one
// item of each member's two) is released with the commit at its new
// position, reason no_room, rather than held: a claim keeps no more
// members than the worker had room for, and the rider's second item is
// processed by a later claim from the committed checkpoint, exactly once.
func TestClaimGroupRiderNotCaughtUpIsReleased(t *testing.T) {
	t.Parallel()
	p := newGroupProc()
	p.beforeGroup = func(ctx context.Context, g *distributor.Group) error {
		for _, b := range g.Batches {
			b.Limit = 1
		}
		return nil
	}
	e, ev, cfg := runRiders(t, "q", 24, 2, p)
	if g := e.largestGroup(); g <= cfg.MaxPartitions {
		t.Fatalf("largest group %d; want riders beyond MaxPartitions (%d)", g, cfg.MaxPartitions)
	}
	if k := e.mostKeptByAClaim(); k > cfg.MaxPartitions {
		t.Fatalf("a claim kept %d partitions; want at most MaxPartitions (%d)", k, cfg.MaxPartitions)
	}
	noRoom := e.releasedFor("no_room")
	if noRoom == 0 {
		t.Fatal("no member released with reason no_room; want the riders its group did not catch up")
	}
	if r := ev.count(func(x distributor.Event) bool { return x.Kind == distributor.EventReleased && x.Reason == "no_room" }); r != noRoom {
		t.Fatalf("%d no_room releases reported, %d in the history", r, noRoom)
	}
	if w := e.heldBy(); len(w) != 0 {
		t.Fatalf("held counts %v after every partition was released; want none", w)
	}
}

// A group with riders that rolls back is claimed member by member, as any
// group, and the members beyond the room it was formed for are released
// after their first batch, caught up or not: here every group fails and
// every lone first batch takes one item of two, so those members are
// released with reason no_room rather than held beyond MaxPartitions.
func TestClaimGroupRidersRolledBackAreReleasedAlone(t *testing.T) {
	t.Parallel()
	p := newGroupProc()
	p.beforeGroup = func(ctx context.Context, g *distributor.Group) error {
		return errors.New("the group fails")
	}
	p.before = func(ctx context.Context, b *distributor.Batch) error {
		if b.Checkpoint.Position == 0 {
			b.Limit = 1
		}
		return nil
	}
	e, _, cfg := runRiders(t, "b", 12, 2, p)
	if g := p.groupSizes(); len(g) == 0 || slices.Max(g) <= cfg.MaxPartitions {
		t.Fatalf("group sizes %v; want a group with riders beyond MaxPartitions (%d)", g, cfg.MaxPartitions)
	}
	if k := e.largestGroup(); k != 1 {
		t.Fatalf("a transaction committed %d claims; want every group rolled back and each member claimed alone", k)
	}
	if r := e.releasedFor("no_room"); r == 0 {
		t.Fatal("no member released with reason no_room; want the riders claimed alone released after their first batch")
	}
	if w := e.heldBy(); len(w) != 0 {
		t.Fatalf("held counts %v after every partition was released; want none", w)
	}
}
