package distributor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/partition"
)

// sumProc is a splittable processor with a prefix-sum state, as pricing's
// cumulative gross: item n's output is n and the running sum before it,
// so a segment started from the wrong state, an item output twice within
// a generation (the primary key) or a gap shows. Its checkpoint state is
// the sum of the partition's items up to the position, n(n+1)/2, which
// Split gives for any point without reading anything.
type sumProc struct {
	before func(ctx context.Context, b *distributor.Batch) error
}

type sumState struct {
	Sum int64 `json:"sum"`
}

func sumAt(n int64) json.RawMessage {
	st, _ := json.Marshal(sumState{Sum: n * (n + 1) / 2})
	return st
}

func (p *sumProc) Process(ctx context.Context, b *distributor.Batch) (distributor.Result, error) {
	if p.before != nil {
		if err := p.before(ctx, b); err != nil {
			return distributor.Result{}, err
		}
	}
	cp := b.Checkpoint
	var st sumState
	if len(cp.State) > 0 {
		if err := json.Unmarshal(cp.State, &st); err != nil {
			return distributor.Result{}, err
		}
	}
	if want := cp.Position * (cp.Position + 1) / 2; st.Sum != want {
		return distributor.Result{}, fmt.Errorf("%s at %d carries sum %d, want %d", b.Lease.Key, cp.Position, st.Sum, want)
	}
	end := min(cp.Position+int64(b.Limit), cp.Available)
	if _, err := b.Tx.ExecContext(ctx, `
		INSERT INTO sum_output (key, generation, n, before, lease_key, owner)
		SELECT ?, ?, n, ?::bigint + (n - 1 - ?::bigint) * (n + ?::bigint) / 2, ?, ? FROM generate_series(?::bigint, ?::bigint) n`,
		b.Partition, cp.Generation, st.Sum, cp.Position, cp.Position, b.Lease.Key, b.Owner, cp.Position+1, end); err != nil {
		return distributor.Result{}, err
	}
	return distributor.Result{Position: end, State: sumAt(end)}, nil
}

func (p *sumProc) Split(ctx context.Context, b *distributor.Batch, size int64) (distributor.Split, error) {
	var s distributor.Split
	for at := b.Checkpoint.Position + size; at < b.Checkpoint.Available; at += size {
		s.Points = append(s.Points, distributor.SplitPoint{Position: at, State: sumAt(at)})
	}
	s.End = sumAt(b.Checkpoint.Available)
	return s, nil
}

func newSumOutput(t *testing.T, e *env) {
	t.Helper()
	if _, err := e.db.Exec(`CREATE TABLE sum_output (key text, generation bigint, n bigint, before bigint,
		lease_key text, owner text, PRIMARY KEY (key, generation, n))`); err != nil {
		t.Fatal(err)
	}
}

// checkSums checks that items 1..n of key were output exactly once in
// generation, each with the sum of the items before it.
func checkSums(t *testing.T, e *env, key string, generation, n int64) {
	t.Helper()
	var cnt, lo, hi, bad int64
	if err := e.db.QueryRow(`SELECT count(*), coalesce(min(n), 0), coalesce(max(n), 0),
		count(*) FILTER (WHERE before <> (n - 1) * n / 2)
		FROM sum_output WHERE key = ? AND generation = ?`, key, generation).Scan(&cnt, &lo, &hi, &bad); err != nil {
		t.Fatal(err)
	}
	if cnt != n || lo != 1 || hi != n || bad != 0 {
		t.Errorf("%s generation %d: %d items %d..%d, %d with a wrong running sum; want 1..%d", key, generation, cnt, lo, hi, bad, n)
	}
}

// A hot partition's backlog is split into segments that several workers
// process at once, each from the state its start carries; work added
// after the split is processed by the partition itself from the state
// after the last segment. Every item exactly once, every running sum
// right, segments released once caught up.
func TestSegmentsOfAHotPartitionAreProcessedByManyWorkers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	newSumOutput(t, e)
	e.addWork(1000, "hot")
	e.addWork(15, keys("small", 6)...)

	// Segment batches wait until two workers are processing segments, so
	// that the test does not depend on which worker is quicker to start.
	var mu sync.Mutex
	owners := map[string]bool{}
	two := make(chan struct{})
	p := &sumProc{before: func(ctx context.Context, b *distributor.Batch) error {
		if b.Partition == b.Lease.Key {
			return nil
		}
		mu.Lock()
		if !owners[b.Owner] {
			owners[b.Owner] = true
			if len(owners) == 2 {
				close(two)
			}
		}
		mu.Unlock()
		select {
		case <-two:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	ev := newEvents()
	var ds []*distributor.Distributor
	for i := range 3 {
		cfg := fastConfig(fmt.Sprintf("w%d", i), ev)
		cfg.UntilDone, cfg.SegmentRecords, cfg.BatchSize = true, 100, 25
		ds = append(ds, e.start(cfg, p))
	}
	for _, d := range ds {
		if err := waitDone(t, d, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if ev.count(kind(distributor.EventSplit)) == 0 {
		t.Fatalf("hot was never split:\n%s", ev.dump())
	}
	checkSums(t, e, "hot", 1, 1000)
	for _, k := range keys("small", 6) {
		checkSums(t, e, k, 1, 15)
	}
	var segOwners, segments, pendingSegments int
	if err := e.db.QueryRow(`SELECT count(DISTINCT owner) FROM sum_output WHERE lease_key <> key`).Scan(&segOwners); err != nil {
		t.Fatal(err)
	}
	if err := e.db.QueryRow(`SELECT count(*), count(*) FILTER (WHERE position < available OR owner IS NOT NULL)
		FROM baton.tasks WHERE segment_of = 'hot'`).Scan(&segments, &pendingSegments); err != nil {
		t.Fatal(err)
	}
	if segOwners < 2 || segments < 2 || pendingSegments != 0 {
		t.Errorf("%d segments (%d pending or held) processed by %d workers; want several, none pending, at least 2 workers",
			segments, pendingSegments, segOwners)
	}

	// Work added after the split: the partition goes on from its own
	// checkpoint, past the segments.
	e.addWork(40, "hot")
	cfg := fastConfig("after", ev)
	cfg.UntilDone, cfg.SegmentRecords, cfg.BatchSize = true, 100, 25
	if err := waitDone(t, e.start(cfg, p), time.Minute); err != nil {
		t.Fatal(err)
	}
	checkSums(t, e, "hot", 1, 1040)
	var position, available int64
	var state []byte
	if err := e.db.QueryRow(`SELECT position, available, checkpoint FROM baton.tasks WHERE partition_key = 'hot'`).
		Scan(&position, &available, &state); err != nil {
		t.Fatal(err)
	}
	var st sumState
	if err := json.Unmarshal(state, &st); err != nil {
		t.Fatal(err)
	}
	if position != 1040 || available != 1040 || st.Sum != 1040*1041/2 {
		t.Errorf("hot at %d of %d with %s; want 1040 of 1040 with %s", position, available, state, sumAt(1040))
	}
}

// Two workers share a split partition's segments by their pending items
// as soon as they are claimable, however much backlog each holds already:
// with every segment held after its first batch, all of them are claimed
// while none has gone further, and neither worker holds more than one
// over its part. A worker that counted only the segments it held and
// those it saw took none of the last ones while its own were pending
// (its part of those in its sight reached, the other's held segments
// uncounted), and they waited for its own to run low, to be processed by
// one worker at the end.
func TestSegmentsAreSharedByItemsWhileTheirBatchesRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	newSumOutput(t, e)
	release := make(chan struct{})
	p := &sumProc{before: func(ctx context.Context, b *distributor.Batch) error {
		_, start, seg := partition.ParseSegmentKey(b.Lease.Key)
		if !seg || b.Checkpoint.Position == start {
			return nil
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	ev := newEvents()
	for _, name := range []string{"x", "y"} {
		cfg := fastConfig(name, ev)
		cfg.SegmentRecords, cfg.BatchSize = 100, 25
		e.start(cfg, p)
	}
	// Both are registered (Start returns once they are): the load each
	// reads on the notification of this work counts two live workers.
	e.addWork(1000, "hot")
	claimed := map[string]bool{}
	ev.wait(t, 30*time.Second, "all 10 segments claimed", func(x distributor.Event) bool {
		if _, _, seg := partition.ParseSegmentKey(x.Key); seg && x.Kind == distributor.EventClaimed {
			claimed[x.Key] = true
		}
		return len(claimed) == 10
	})
	rows, err := e.db.Query(`SELECT owner, count(*), sum(available - position) FROM baton.tasks
		WHERE segment_of = 'hot' GROUP BY owner ORDER BY owner`)
	if err != nil {
		t.Fatal(err)
	}
	var counts []int
	var shares []string
	for rows.Next() {
		var owner string
		var n int
		var pending int64
		if err := rows.Scan(&owner, &n, &pending); err != nil {
			t.Fatal(err)
		}
		counts = append(counts, n)
		shares = append(shares, fmt.Sprintf("%s: %d segments, %d items pending", owner, n, pending))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// 6 and 4 was seen once in 20 runs beside two busy loops: a claim in
	// flight reads as an unowned segment to the other worker until its
	// first batch commits.
	if len(counts) != 2 || counts[0]+counts[1] != 10 || max(counts[0]-counts[1], counts[1]-counts[0]) > 2 {
		t.Fatalf("segments held: %v; want 10, 5 by each of the two workers (or 6 and 4)", shares)
	}
	close(release)
	// Caught up, not handed back: a segment handed back to the other
	// worker (a rebalance) is released too, with its items still
	// pending, and is caught up later by its next owner.
	done := map[string]bool{}
	ev.wait(t, time.Minute, "all 10 segments caught up", func(x distributor.Event) bool {
		if _, _, seg := partition.ParseSegmentKey(x.Key); seg && x.Kind == distributor.EventReleased && x.Reason == "caught_up" {
			done[x.Key] = true
		}
		return len(done) == 10
	})
	checkSums(t, e, "hot", 1, 1000)
}

// A processor that is not a Splitter is never split, however large the
// backlog.
func TestPartitionsOfAProcessorThatCannotSplitStayWhole(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addWork(500, "big")
	ev := newEvents()
	cfg := fastConfig("w", ev)
	cfg.UntilDone, cfg.SegmentRecords, cfg.BatchSize = true, 10, 50
	if err := waitDone(t, e.start(cfg, newProc()), time.Minute); err != nil {
		t.Fatal(err)
	}
	e.verify()
	var segments int
	if err := e.db.QueryRow(`SELECT count(*) FROM baton.tasks WHERE segment_of IS NOT NULL`).Scan(&segments); err != nil {
		t.Fatal(err)
	}
	if n := ev.count(kind(distributor.EventSplit)); n != 0 || segments != 0 {
		t.Fatalf("%d splits, %d segment rows; want none", n, segments)
	}
}

// A rewind of a split partition waits for the segment batches in flight,
// removes its segments (their holders are fenced out) and the partition
// is processed again, split again, under the new generation: each item of
// each generation once, with the right running sums. The worker runs
// until the new generation is done rather than until nothing is pending:
// the rewind's FOR UPDATE of the partition's row waits while segment
// batches hold it FOR KEY SHARE, and later batches can take that lock
// ahead of it, so on a busy machine the segments may all finish first,
// and a worker run until done could find nothing pending and exit just
// before the rewind commits.
func TestRewindRemovesAPartitionsSegments(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	newSumOutput(t, e)
	e.addWork(600, "hot")
	reached := make(chan struct{})
	gate := make(chan struct{})
	var once sync.Once
	p := &sumProc{before: func(ctx context.Context, b *distributor.Batch) error {
		if b.Checkpoint.Generation == 1 && b.Partition != b.Lease.Key {
			once.Do(func() { close(reached); <-gate })
		}
		return nil
	}}
	ev := newEvents()
	cfg := fastConfig("w", ev)
	cfg.SegmentRecords, cfg.BatchSize = 100, 20
	d := e.start(cfg, p)
	testutil.Receive(t, reached, 30*time.Second, "a segment's batch")

	done, rewound := rewindInBackground(e, partition.Rewind{Key: "hot", Position: 0})
	waitForRewindLockWait(t, e)
	close(gate)
	select {
	case err := <-done:
		t.Fatal(err)
	case <-rewound:
	case <-time.After(testutil.WaitTimeout(30 * time.Second)):
		t.Fatal("the rewind did not commit")
	}
	testutil.Eventually(t, time.Minute, "generation 2 of hot processed", func() error {
		var n int
		if err := e.db.QueryRow(`SELECT count(*) FROM sum_output WHERE key = 'hot' AND generation = 2`).Scan(&n); err != nil {
			return err
		}
		if n < 600 {
			return fmt.Errorf("%d of 600 items", n)
		}
		return nil
	})
	d.Stop()
	checkSums(t, e, "hot", 2, 600)
	var gen1Segments int
	if err := e.db.QueryRow(`SELECT count(*) FROM baton.tasks WHERE segment_of = 'hot' AND generation = 1`).Scan(&gen1Segments); err != nil {
		t.Fatal(err)
	}
	if gen1Segments != 0 {
		t.Errorf("%d segments of generation 1 left after the rewind", gen1Segments)
	}
	if t.Failed() {
		t.Log(ev.dump())
	}
}

// Producers cannot add work under a segment's key.
func TestAddWorkRefusesASegmentKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := partition.SegmentKey("hot", 100)
	if p, start, ok := partition.ParseSegmentKey(key); !ok || p != "hot" || start != 100 {
		t.Fatalf("ParseSegmentKey(%q) = %q, %d, %v", key, p, start, ok)
	}
	_, err := partition.NewStore(e.db, "").AddWork(context.Background(), key, 1)
	if err == nil {
		t.Fatalf("AddWork(%q) succeeded", key)
	}
	for _, k := range []string{"hot#100", "hot#+000000000000000100", "#0000000000000000100", "hot"} {
		if _, _, ok := partition.ParseSegmentKey(k); ok {
			t.Errorf("ParseSegmentKey(%q) says it is a segment", k)
		}
	}
}

// A leader keeps its caught-up partitions, but not segments: they get no
// more work, so each is released once caught up while the partition it
// was split from stays held, waiting for work.
func TestLeaderReleasesCaughtUpSegments(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	newSumOutput(t, e)
	e.addWork(600, "hot")
	ev := newEvents()
	cfg := fastConfig("leader", ev)
	cfg.Mode, cfg.SegmentRecords, cfg.BatchSize = distributor.ModeLeader, 100, 25
	d := e.start(cfg, &sumProc{})
	testutil.Eventually(t, time.Minute, "every item processed, the segments released, hot still held", func() error {
		var items, heldSegments, segments int
		var hotOwner *string
		if err := e.db.QueryRow(`SELECT (SELECT count(*) FROM sum_output WHERE key = 'hot'),
			(SELECT count(*) FROM baton.tasks WHERE segment_of = 'hot' AND owner IS NOT NULL),
			(SELECT count(*) FROM baton.tasks WHERE segment_of = 'hot'),
			(SELECT owner FROM baton.tasks WHERE partition_key = 'hot')`).Scan(&items, &heldSegments, &segments, &hotOwner); err != nil {
			return err
		}
		if items != 600 || segments == 0 || heldSegments != 0 || hotOwner == nil {
			return fmt.Errorf("%d items, %d segments of which %d held, hot held: %v", items, segments, heldSegments, hotOwner != nil)
		}
		return nil
	})
	checkSums(t, e, "hot", 1, 600)
	d.Stop()
}
