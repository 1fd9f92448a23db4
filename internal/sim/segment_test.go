package sim

import (
	"slices"
	"testing"
	"time"
)

// hugeContract is one contract of items records priced by workers at a
// fixed rate of one record per itemTime each, with the distributor's
// defaults (heartbeat 1s, stale-after 10s, confirm 3, batches of 16,384
// records, 8 partitions a worker, segments of 100,000 records) and the
// pricer's chunks of 1,024 records, and no faults.
func hugeContract(seed int64, workers int, items int64, itemTime time.Duration) Config {
	return Config{
		Seed: seed, Workers: workers, Partitions: 1, Work: []int64{items},
		Heartbeat: time.Second, StaleAfter: 10 * time.Second, Confirm: 3,
		BatchSize: 16384, MaxPartitions: 8, Mode: ModeLock,
		SegmentRecords: 100_000, SplitChunk: 1024, ItemTime: itemTime,
		AdvanceCAS: true, ClaimWithBatch: true,
		Duration: 10 * time.Second,
	}
}

// TestThirtyTwoWorkersOnOneHugeContract: 32 workers price one contract
// of 100,000,000 records at 100,000 records a second each. Split into
// segments, it takes at most 1.25 × the time the 32 of them would take
// if the records were shared out perfectly (31.25 s).
func TestThirtyTwoWorkersOnOneHugeContract(t *testing.T) {
	t.Parallel()
	const (
		workers  = 32
		items    = 100_000_000
		itemTime = 10 * time.Microsecond
	)
	seed := baseSeed(t)
	cfg := hugeContract(seed, workers, items, itemTime)
	start := time.Now()
	r := Run(cfg)
	if r.Violation != nil {
		t.Fatalf("%v\nreplay with BATON_SEED=%d", r.Violation, seed)
	}
	if !r.Drained || r.ItemsChecked != items {
		t.Fatalf("drained: %v, items checked: %d of %d (truncated: %v)", r.Drained, r.ItemsChecked, int64(items), r.Truncated)
	}
	ideal := time.Duration(items) * itemTime / workers
	factor := float64(r.LastCommit) / float64(ideal)
	t.Logf("%d workers, %d records at %s each: done at %s, ideal %s: factor %.3f (bound 1.25); %d splits, %d segments, %d claims (%d of segments), %d commits, %d events, wall %s",
		workers, int64(items), itemTime, r.LastCommit.Round(time.Millisecond), ideal, factor, r.Splits, r.Segments, r.Claims, r.SegmentClaims, r.Commits, r.Events,
		time.Since(start).Round(time.Millisecond))
	if factor > 1.25 {
		t.Errorf("the contract took %s, %.3f × the ideal %s: above 1.25 (replay with BATON_SEED=%d)", r.LastCommit, factor, ideal, seed)
	}
}

// The ledger a partition's items are checked against: spans merge as
// commits fill them in, in any order, and any item committed twice is
// found with the commit that held it first.
func TestLedgerPerPartitionItem(t *testing.T) {
	t.Parallel()
	p := &row{}
	for _, c := range []commitRec{{from: 11, to: 20, row: 2}, {from: 1, to: 5, row: 0}, {from: 31, to: 40, row: 3}, {from: 6, to: 10, row: 1}} {
		if o, dup := p.overlap(c.from, c.to); dup {
			t.Fatalf("items %d..%d: overlap with %+v reported", c.from, c.to, o)
		}
		p.record(c)
	}
	if want := []span{{0, 20}, {30, 40}}; !slices.Equal(p.done, want) {
		t.Fatalf("ledger %v, want %v", p.done, want)
	}
	for _, q := range []struct {
		from, to int64
		dup      bool
		row      int
	}{{21, 30, false, 0}, {20, 21, true, 2}, {30, 31, true, 3}, {25, 29, false, 0}, {1, 1, true, 0}, {40, 45, true, 3}, {41, 50, false, 0}} {
		c, dup := p.overlap(q.from, q.to)
		if dup != q.dup || dup && c.row != q.row {
			t.Errorf("items %d..%d: overlap %v with %+v, want %v with row %d", q.from, q.to, dup, c, q.dup, q.row)
		}
	}
	p.record(commitRec{from: 21, to: 30, row: 4})
	if want := []span{{0, 40}}; !slices.Equal(p.done, want) {
		t.Fatalf("ledger %v, want %v", p.done, want)
	}
}

// Random schedules with a Splitter processor in every one, segments small
// enough that backlogs and added work are split again and again: the
// invariants hold under every fault, and splits and claims of segments
// happen. Half of them stall commits and reset connections often, so
// that splits whose commit outcome was unknown are retried and meet their
// own segments' keys.
func TestSegmentSchedules(t *testing.T) {
	t.Parallel()
	base := baseSeed(t)
	n := 200
	if soak() {
		n *= 20
	}
	mk := func(seed int64) Config {
		c := defaultMix(seed)
		if c.SegmentRecords == 0 {
			c.SegmentRecords = 1 + int64(uint64(seed)%uint64(3*c.BatchSize))
			c.SplitChunk = 1 + int64(uint64(seed)%uint64(max(1, c.SegmentRecords/2)))
		}
		if seed%2 != 0 {
			c.Faults = Faults{Stall: 1, Reset: 2, Work: 3, Crash: 0.05, MaxStall: c.StaleAfter / 2}
		}
		return c
	}
	s := runSchedules(n, time.Time{}, base, mk)
	t.Logf("%d schedules (base seed %d): %d splits, %d segments, %d claims of segments, %d splits that met another's segment key, %d items checked exactly once, %d takeovers",
		s.schedules, base, s.splits, s.segments, s.segClaim, s.splitConflicts, s.checked, s.takeovers)
	if s.first != nil {
		reportViolation(t, s.first, s.firstCfg)
		t.Fatalf("%v\nreplay with BATON_SEED=%d go test ./internal/sim -run TestSegmentSchedules", s.first, s.first.Seed)
	}
	if s.truncated > 0 {
		t.Fatalf("%d schedule(s) hit MaxEvents; replay with BATON_SEED=%d", s.truncated, base)
	}
	if s.splits == 0 || s.segClaim == 0 {
		t.Fatalf("%d splits, %d claims of segments: want some", s.splits, s.segClaim)
	}
}
