package distributor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
	"github.com/jonboulle/clockwork"
)

// heldGroupProc writes one output row per item, as the package's other
// test processors do, and notes each group's members and transaction.
type heldGroupProc struct {
	fail   string // a member of this key fails the group
	groups [][]string
	txids  []int64
	held   []bool
}

func (p *heldGroupProc) Process(ctx context.Context, b *Batch) (Result, error) {
	if b.Lease.Key == p.fail {
		return Result{}, errors.New("bad partition")
	}
	end := b.Checkpoint.Position + int64(b.Limit)
	if _, err := b.Tx.ExecContext(ctx, `INSERT INTO test_output (key, n)
		SELECT ?, n FROM generate_series(?::bigint, ?::bigint) n`, b.Lease.Key, b.Checkpoint.Position+1, end); err != nil {
		return Result{}, err
	}
	return Result{Position: end, State: []byte(fmt.Sprintf(`{"last": %d}`, end))}, nil
}

func (p *heldGroupProc) ProcessGroup(ctx context.Context, g *Group) ([]Result, error) {
	var keys []string
	for _, b := range g.Batches {
		keys = append(keys, b.Lease.Key)
	}
	var txid int64
	if err := g.Tx.QueryRowContext(ctx, `SELECT txid_current()`).Scan(&txid); err != nil {
		return nil, err
	}
	p.groups, p.txids, p.held = append(p.groups, keys), append(p.txids, txid), append(p.held, g.Owned)
	out := make([]Result, len(g.Batches))
	for i, b := range g.Batches {
		r, err := p.Process(ctx, b)
		if err != nil {
			return nil, err
		}
		out[i] = r
	}
	return out, nil
}

// heldFixture is a distributor (not started) holding partitions a, b and c
// (10 items each, 2 of them processed), with their leases tracked.
func heldFixture(t *testing.T, p Processor) (*Distributor, *dbconn.DB, []*held) {
	t.Helper()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE test_output (key text, n bigint, PRIMARY KEY (key, n));
		INSERT INTO baton.tasks (partition_key, available) VALUES ('a', 10), ('b', 10), ('c', 10)`); err != nil {
		t.Fatal(err)
	}
	d, err := New(db, p, Config{Name: "w", Heartbeat: time.Second, StaleAfter: 20 * time.Second, BatchSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.baseStop)
	store := taskstore.NewStore(db, "")
	cands, err := store.Candidates(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	won, err := store.Claim(ctx, d.InstanceID(), d.cfg.StaleAfter, cands)
	if err != nil || len(won) != 3 {
		t.Fatalf("claimed %v, %v", won, err)
	}
	slices.SortFunc(won, func(x, y taskstore.Claimed) int { return cmpString(x.Key, y.Key) })
	var hs []*held
	for _, c := range won {
		h := &held{lease: d.hb.Track(d.base, c.Lease, sent, false), started: true}
		t.Cleanup(func() { d.hb.Release(h.lease) })
		hs = append(hs, h)
		if _, err := db.ExecContext(ctx, `INSERT INTO test_output SELECT ?, n FROM generate_series(1, 2) n;
			UPDATE baton.tasks SET position = 2 WHERE partition_key = ?`, c.Key, c.Key); err != nil {
			t.Fatal(err)
		}
	}
	return d, db, hs
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// positions reads the partitions' checkpoints, and the transactions that
// last wrote them.
func positions(t *testing.T, db *dbconn.DB) (map[string]int64, map[string]string) {
	t.Helper()
	rows, err := db.Query(`SELECT partition_key, position, xmin::text FROM baton.tasks`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	pos, xmin := map[string]int64{}, map[string]string{}
	for rows.Next() {
		var k, x string
		var p int64
		if err := rows.Scan(&k, &p, &x); err != nil {
			t.Fatal(err)
		}
		pos[k], xmin[k] = p, x
	}
	return pos, xmin
}

// A member whose claim was bumped by another claim drops out of the group
// at its fence, with the fence's error; the others' batches commit in one
// transaction, from checkpoints past 0, marked Held.
func TestHeldGroupDropsAMemberFencedByAnotherClaim(t *testing.T) {
	t.Parallel()
	p := &heldGroupProc{}
	d, db, hs := heldFixture(t, p)
	if _, err := db.Exec(`UPDATE baton.tasks SET version = version + 1, owner = 'other#1' WHERE partition_key = 'b'`); err != nil {
		t.Fatal(err)
	}
	res, alone, err := d.heldGroup(p, hs)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(alone, true) {
		t.Fatalf("members to run alone: %v", alone)
	}
	if !errors.Is(res[1].err, partition.ErrFenced) {
		t.Fatalf("fenced member's outcome %+v; want ErrFenced", res[1])
	}
	for _, i := range []int{0, 2} {
		if r := res[i]; r.err != nil || r.items != 4 || r.caughtUp || r.released {
			t.Fatalf("member %d: %+v; want 4 items, not caught up", i, r)
		}
	}
	if len(p.groups) != 1 || !slices.Equal(p.groups[0], []string{"a", "c"}) || !p.held[0] {
		t.Fatalf("groups %v (held %v); want one held group of a and c", p.groups, p.held)
	}
	pos, xmin := positions(t, db)
	if pos["a"] != 6 || pos["c"] != 6 || pos["b"] != 2 {
		t.Fatalf("positions %v; want a and c at 6, b at 2", pos)
	}
	if xmin["a"] != xmin["c"] || xmin["a"] != fmt.Sprint(p.txids[0]) {
		t.Fatalf("checkpoints written by transactions %v; want both by the group's, %d", xmin, p.txids[0])
	}
}

// A processor error in a group rolls it all back, and every member is to
// run its batch alone; nothing is written.
func TestHeldGroupProcessorErrorRollsBackAndSendsEachAlone(t *testing.T) {
	t.Parallel()
	p := &heldGroupProc{fail: "b"}
	d, db, hs := heldFixture(t, p)
	_, alone, err := d.heldGroup(p, hs)
	if err == nil || !slices.Equal(alone, []bool{true, true, true}) {
		t.Fatalf("group ended with %v, alone %v; want an error and every member alone", err, alone)
	}
	pos, _ := positions(t, db)
	var out int
	if err := db.QueryRow(`SELECT count(*) FROM test_output`).Scan(&out); err != nil {
		t.Fatal(err)
	}
	if pos["a"] != 2 || pos["b"] != 2 || pos["c"] != 2 || out != 6 {
		t.Fatalf("positions %v, %d outputs; want all at 2 and 6 outputs", pos, out)
	}
}

// A member whose lease ends during the group cancels it: rolled back, each
// member alone.
func TestHeldGroupEndsWithAMembersLease(t *testing.T) {
	t.Parallel()
	p := &heldGroupProc{}
	d, db, hs := heldFixture(t, p)
	d.hb.Release(hs[2].lease)
	_, alone, err := d.heldGroup(p, hs)
	if err == nil || !slices.Equal(alone, []bool{true, true, true}) {
		t.Fatalf("group ended with %v, alone %v; want an error and every member alone", err, alone)
	}
	if pos, _ := positions(t, db); pos["a"] != 2 {
		t.Fatalf("positions %v; want all at 2", pos)
	}
}

// Members that catch up are released with the group's commit (lock
// mode), and a member found caught up at the fence is told so.
func TestHeldGroupReleasesCaughtUpMembers(t *testing.T) {
	t.Parallel()
	p := &heldGroupProc{}
	d, db, hs := heldFixture(t, p)
	d.cfg.BatchSize = 100
	d.size = newSizer(100, 100, 100, time.Second, time.Second)
	if _, err := db.Exec(`UPDATE baton.tasks SET position = 10 WHERE partition_key = 'c'`); err != nil {
		t.Fatal(err)
	}
	res, _, err := d.heldGroup(p, hs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res[:2] {
		if r.err != nil || r.items != 8 || !r.caughtUp || !r.released {
			t.Fatalf("member %d: %+v; want 8 items, caught up and released", i, r)
		}
	}
	if r := res[2]; r.err != nil || r.items != 0 || !r.caughtUp || r.released {
		t.Fatalf("member found caught up: %+v", r)
	}
	var owned int
	if err := db.QueryRow(`SELECT count(*) FROM baton.tasks WHERE owner IS NOT NULL`).Scan(&owned); err != nil {
		t.Fatal(err)
	}
	if owned != 1 {
		t.Fatalf("%d partitions still owned; want only c (released by its loop)", owned)
	}
}

// timedGroupProc is heldGroupProc on an injected clock: each group takes
// the next of took (the last one again once they run out), and the limits
// its members were given are noted.
type timedGroupProc struct {
	heldGroupProc
	clock  *clockwork.FakeClock
	took   []time.Duration
	limits [][]int
}

func (p *timedGroupProc) ProcessGroup(ctx context.Context, g *Group) ([]Result, error) {
	var limits []int
	for _, b := range g.Batches {
		limits = append(limits, b.Limit)
	}
	p.limits = append(p.limits, limits)
	out, err := p.heldGroupProc.ProcessGroup(ctx, g)
	p.clock.Advance(p.took[min(len(p.limits), len(p.took))-1])
	return out, err
}

// Held groups keep to BatchTarget as lone batches do: a group slower than
// twice the target halves the next group's bound, however long it is
// before the statement timeout, down to where the batch bound starts;
// groups that took all the bound allowed and were quick double it back,
// up to ClaimGroupItems.
func TestHeldGroupBoundFollowsTheBatchTarget(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	p := &timedGroupProc{clock: clock, took: []time.Duration{
		3 * time.Second, 3 * time.Second, 3 * time.Second, // slow: past twice the target
		100 * time.Millisecond, // quick: under half of it
	}}
	d, db, hs := heldFixture(t, p)
	if _, err := db.Exec(`UPDATE baton.tasks SET available = 100000`); err != nil {
		t.Fatal(err)
	}
	d.cfg.Clock = clock
	// Batches of at most 100 items (where the batch bound starts), groups
	// of at most 300; a target of 1 s, a timeout budget of 20 s that no
	// group comes near.
	d.size = newSizer(100, 100, 300, 20*time.Second, time.Second)
	// Items each group took (shared evenly among its three members), and
	// the group bound after it.
	want := []int{
		300, // 3 s: halved
		150, // 3 s: halved, to the batch bound's start
		100, // 3 s: stays at the start
		100, // quick at the bound: doubled
		200, // doubled again, to ClaimGroupItems
		300, // and no further
		300,
	}
	wantGroup := []int{150, 100, 100, 200, 300, 300, 300}
	for i := range want {
		res, alone, err := d.heldGroup(p, hs)
		if err != nil || slices.Contains(alone, true) {
			t.Fatalf("group %d: %v, alone %v", i, err, alone)
		}
		for k, r := range res {
			if r.err != nil || r.items != int64(p.limits[i][k]) {
				t.Fatalf("group %d member %d: %+v; want its limit %d processed", i, k, r, p.limits[i][k])
			}
		}
		sum := 0
		for _, l := range p.limits[i] {
			sum += l
			if l < want[i]/3 || l > want[i]/3+1 {
				t.Fatalf("group %d shared %v; want about %d each", i, p.limits[i], want[i]/3)
			}
		}
		if sum != want[i] {
			t.Fatalf("group %d took %v items; want %d (groups so far %v)", i, p.limits[i], want[i], p.limits)
		}
		if g := d.size.groupLimit(); g != wantGroup[i] {
			t.Fatalf("group bound %d after group %d; want %d", g, i, wantGroup[i])
		}
	}
	if b := d.size.batchLimit(); b != 100 {
		t.Fatalf("batch bound %d; want 100", b)
	}
}
