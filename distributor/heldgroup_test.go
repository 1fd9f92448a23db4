package distributor_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/distributor"
)

// txids notes which partitions' batches (past their first) each
// transaction carried.
type txids struct {
	mu   sync.Mutex
	keys map[int64][]string
}

func (x *txids) note(ctx context.Context, b *distributor.Batch) error {
	if b.Checkpoint.Position == 0 {
		return nil // a first batch, claimed alone or in a claim group
	}
	var id int64
	if err := b.Tx.QueryRowContext(ctx, `SELECT txid_current()`).Scan(&id); err != nil {
		return err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.keys == nil {
		x.keys = map[int64][]string{}
	}
	x.keys[id] = append(x.keys[id], b.Lease.Key)
	return nil
}

// largest is the most partitions one transaction carried batches of.
func (x *txids) largest() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := 0
	for _, ks := range x.keys {
		n = max(n, len(ks))
	}
	return n
}

// heldGroups notes the members of every group of held partitions.
func heldGroups(p *groupProc) *[][]string {
	var mu sync.Mutex
	var out [][]string
	p.beforeGroup = func(ctx context.Context, g *distributor.Group) error {
		if !g.Owned {
			return nil
		}
		var ks []string
		for _, b := range g.Batches {
			if b.Checkpoint.Position == 0 {
				return errors.New("a held group's member has not had its first batch")
			}
			ks = append(ks, b.Lease.Key)
		}
		mu.Lock()
		out = append(out, ks)
		mu.Unlock()
		return nil
	}
	return &out
}

// Partitions a worker holds, with many batches each, have their batches
// committed several to a transaction (a held group forms whenever batches
// become ready while another is in flight), and every item is output
// exactly once.
func TestHeldPartitionsCommitTogether(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 8
	e.addWork(200, keys("h", n)...)
	ev := newEvents()
	cfg := groupConfig("w", ev)
	p := newGroupProc()
	var x txids
	p.before = x.note
	groups := heldGroups(p)
	d := e.start(cfg, p)
	if err := waitDone(t, d, 60*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, ev.dump())
	}
	e.verify()
	if got := x.largest(); got < 2 {
		t.Fatalf("at most %d held partition per transaction; want several", got)
	}
	for _, g := range *groups {
		if len(g) > cfg.ClaimGroup || !slices.IsSorted(g) {
			t.Fatalf("held group %v: more than ClaimGroup (%d) members, or not in key order", g, cfg.ClaimGroup)
		}
	}
	if f := ev.count(kind(distributor.EventFailed)) + ev.count(kind(distributor.EventFenced)); f != 0 {
		t.Fatalf("%d failures or fence rejections:\n%s", f, ev.dump())
	}
	t.Logf("%d held groups; at most %d partitions in one transaction", len(*groups), x.largest())
}

// A processor error for one partition rolls back the held group it is in;
// each member then runs its batch alone, so only that partition fails
// (and is quarantined after its attempts) while the others finish.
func TestHeldGroupErrorFailsOnlyThePartitionThatCausesIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const bad = "h002"
	e.addWork(100, keys("h", 6)...)
	ev := newEvents()
	cfg := groupConfig("w", ev)
	cfg.MaxAttempts = 2
	p := newGroupProc()
	p.before = func(ctx context.Context, b *distributor.Batch) error {
		if b.Lease.Key == bad && b.Checkpoint.Position > 0 {
			return errors.New("bad partition")
		}
		return nil
	}
	groups := heldGroups(p)
	d := e.start(cfg, p)
	if err := waitDone(t, d, 60*time.Second); !errors.Is(err, distributor.ErrIncomplete) {
		t.Fatalf("run ended with %v; want %v\n%s", err, distributor.ErrIncomplete, ev.dump())
	}
	rows, err := e.db.Query(`SELECT partition_key FROM baton.tasks WHERE position < available OR failed_at IS NOT NULL`)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		left = append(left, k)
	}
	_ = rows.Close()
	if !slices.Equal(left, []string{bad}) {
		t.Fatalf("partitions failed or left unprocessed: %v; want only %s\n%s", left, bad, ev.dump())
	}
	for _, k := range []distributor.EventKind{distributor.EventFailed, distributor.EventQuarantined} {
		for _, x := range ev.snapshot() {
			if x.Kind == k && x.Key != bad {
				t.Fatalf("%s recorded against %s:\n%s", k, x.Key, ev.dump())
			}
		}
	}
	if ev.count(kind(distributor.EventQuarantined)) != 1 {
		t.Fatalf("want %s quarantined once:\n%s", bad, ev.dump())
	}
	var dup int
	if err := e.db.QueryRow(`SELECT count(*) FROM test_output o JOIN baton.tasks t ON t.partition_key = o.key
		WHERE o.n > t.position`).Scan(&dup); err != nil {
		t.Fatal(err)
	}
	if dup != 0 {
		t.Fatalf("%d outputs past their partition's checkpoint", dup)
	}
	withBad := 0
	for _, g := range *groups {
		if len(g) > 1 && slices.Contains(g, bad) {
			withBad++
		}
	}
	t.Logf("%d held groups, %d of them with %s: %v; group sizes %v", len(*groups), withBad, bad, *groups, p.groupSizes())
}
