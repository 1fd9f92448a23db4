package distributor_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/partition"
)

// A worker that owns a partition when it is paused lets the batch in
// flight commit and releases the partition at that checkpoint, within a
// heartbeat, and claims it no more while it is paused, though work is added
// to it meanwhile; resuming it makes the worker claim it at once (the
// notification lowers its floor below the row, which kept its place in
// line), and every item is processed exactly once.
func TestPausedPartitionIsReleasedAndResumed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ev := newEvents()
	p := newProc()
	var block atomic.Bool
	inFlight, unblock := make(chan struct{}, 1), make(chan struct{})
	p.before = func(ctx context.Context, b *distributor.Batch) error {
		if b.Lease.Key == "p" && block.CompareAndSwap(true, false) {
			inFlight <- struct{}{}
			<-unblock
		}
		return nil
	}
	e.addWork(1000, "p")
	cfg := fastConfig("w", ev)
	cfg.StaleAfter = 5 * time.Second // no lease may run out while the batch waits
	e.start(cfg, p)
	ev.wait(t, 30*time.Second, "a first checkpoint of p", func(x distributor.Event) bool {
		return x.Kind == distributor.EventCheckpoint && x.Key == "p"
	})
	block.Store(true)
	select {
	case <-inFlight:
	case <-time.After(testutil.WaitTimeout(30 * time.Second)):
		t.Fatal("no batch of p started")
	}
	admin := partition.NewStore(e.db, "")
	ctx := context.Background()
	if _, err := admin.Pause(ctx, "test", "checking the release"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Pause(ctx, "test", "the partition too", "p"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Resume(ctx, "test"); err != nil { // the kind; p stays paused
		t.Fatal(err)
	}
	close(unblock)
	rel := ev.wait(t, 30*time.Second, "p released because paused", func(x distributor.Event) bool {
		return x.Kind == distributor.EventReleased && x.Key == "p"
	})
	if rel.Reason != "paused" {
		t.Fatalf("p released with reason %q, want paused", rel.Reason)
	}
	last := lastCheckpoint(ev, "p")
	var position, outputs int64
	if err := e.db.QueryRow(`SELECT position, (SELECT count(*) FROM test_output WHERE key = 'p') FROM baton.tasks WHERE partition_key = 'p'`).Scan(&position, &outputs); err != nil {
		t.Fatal(err)
	}
	if position != last || outputs != position || position == 1000 {
		t.Fatalf("released at position %d with %d outputs, last checkpoint %d: want the batch in flight committed whole, work left", position, outputs, last)
	}

	// Work added while paused is kept; another partition's work is done
	// meanwhile, and p is not claimed again.
	releasedAt := len(ev.snapshot())
	e.addWork(50, "p", "q")
	ev.wait(t, 30*time.Second, "q done", func(x distributor.Event) bool {
		return x.Kind == distributor.EventCheckpoint && x.Key == "q" && x.Position == 50
	})
	for _, x := range ev.snapshot()[releasedAt:] {
		if x.Kind == distributor.EventClaimed && x.Key == "p" {
			t.Fatalf("p claimed while paused: %+v", x)
		}
	}

	resumedAt := time.Now()
	if _, err := admin.Resume(ctx, "test", "p"); err != nil {
		t.Fatal(err)
	}
	// Sooner than a full read of the claimable rows (FullReadInterval, 30 s
	// by default) would find it: the resume's notification lowered the floor.
	ev.wait(t, 20*time.Second, "p done after resuming", func(x distributor.Event) bool {
		return x.Kind == distributor.EventCheckpoint && x.Key == "p" && x.Position == 1050
	})
	t.Logf("p claimed and finished %v after resuming", time.Since(resumedAt).Round(time.Millisecond))
	e.verify()
}

// lastCheckpoint is the position of key's last checkpoint event.
func lastCheckpoint(ev *events, key string) int64 {
	var last int64
	for _, x := range ev.snapshot() {
		if x.Kind == distributor.EventCheckpoint && x.Key == key {
			last = x.Position
		}
	}
	return last
}
