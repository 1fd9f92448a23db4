package distributor_test

import (
	"context"
	"errors"
	"github.com/batonhq/baton/internal/notify"
	"testing"
	"time"

	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/partition"
)

// An until-done worker that holds nothing while work waits out a back-off
// reads the cluster load every round; a notification of new work must not
// defer its claims for ever (each of those reads used to reset the
// once-a-heartbeat limit on the recompute the notification asked for, so
// the new work waited for the back-off to end).
func TestUntilDoneWorkerHoldingNothingClaimsNotifiedWork(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addWork(1, "bad")
	p := newProc()
	p.before = func(ctx context.Context, b *distributor.Batch) error {
		if b.Lease.Key == "bad" {
			return errors.New("this partition always fails")
		}
		return nil
	}
	ev := newEvents()
	cfg := fastConfig("w", ev)
	// Rounds a heartbeat apart, as with the defaults: the lost recompute
	// then stays out of phase with the polls (with very short intervals
	// timer jitter soon put it back in phase).
	cfg.UntilDone, cfg.Heartbeat, cfg.StaleAfter = true, time.Second, 5*time.Second
	cfg.Backoff, cfg.MaxBackoff = time.Hour, time.Hour
	beats := make(chan struct{}, 100)
	cfg.OnHeartbeat = func(err error, _ time.Duration, _ int) {
		if err == nil {
			select {
			case beats <- struct{}{}:
			default:
			}
		}
	}
	d := e.start(cfg, p)
	ev.wait(t, 30*time.Second, "bad's failure", func(x distributor.Event) bool {
		return x.Kind == distributor.EventFailed && x.Key == "bad"
	})
	// A notification of work while the worker holds nothing (here one
	// with no work behind it), then, a few rounds later, the new work.
	if _, err := e.db.Exec(`SELECT pg_notify(?, ?)`, notify.Channel,
		notify.Payload(notify.Work, partition.DefaultKind)); err != nil {
		t.Fatal(err)
	}
	for len(beats) > 0 {
		<-beats
	}
	for range 3 {
		testutil.Receive(t, beats, 30*time.Second, "a heartbeat")
	}
	e.addWork(5, "new")
	ev.wait(t, 20*time.Second, "new processed while bad backs off for an hour", func(x distributor.Event) bool {
		return x.Kind == distributor.EventCheckpoint && x.Key == "new" && x.Position == 5
	})
	d.Stop()
}

// Until-done workers stop as soon as the last partition is done, not at
// the heartbeat and poll after it: a partition released with its last
// batch is counted as held by the load until its worker's next
// heartbeat, so the end used to wait for that heartbeat and then a poll
// (here 10 s each; the run's own work takes well under a second).
func TestUntilDoneWorkersStopWhenTheLastPartitionIsDone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	parts := keys("p", 6)
	e.addWork(50, parts...)
	ev := newEvents()
	var ds []*distributor.Distributor
	for _, name := range []string{"w1", "w2"} {
		cfg := fastConfig(name, ev)
		cfg.UntilDone, cfg.Heartbeat, cfg.StaleAfter = true, 10*time.Second, 40*time.Second
		ds = append(ds, e.start(cfg, newProc()))
	}
	for _, k := range parts {
		ev.wait(t, 30*time.Second, k+" done", func(x distributor.Event) bool {
			return x.Kind == distributor.EventCheckpoint && x.Key == k && x.Position == 50
		})
	}
	done := time.Now()
	for _, d := range ds {
		if err := waitDone(t, d, 60*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(done); took > 3*time.Second {
		t.Fatalf("the workers stopped %v after the last partition was done, want at most 3s (heartbeat and poll are 10s)", took.Round(time.Millisecond))
	}
	e.verify()
}
