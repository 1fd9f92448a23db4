package distributor_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/internal/testutil"
)

// registerGhost registers instance id as a live worker for an hour,
// holding nothing, as its first heartbeat would.
func registerGhost(t *testing.T, e *env, id string) {
	t.Helper()
	store := taskstore.NewStore(e.db, "")
	if _, err := store.HeartbeatBelow(context.Background(), taskstore.Worker{InstanceID: id, Name: id[:len(id)-5]},
		time.Hour, 2*time.Hour, nil); err != nil {
		t.Fatal(err)
	}
}

// killGhost makes instance id dead, as a SIGKILLed worker is once a
// lease's length has passed: its registration and its leases ended.
func killGhost(t *testing.T, e *env, id string) {
	t.Helper()
	if _, err := e.db.Exec(`WITH w AS (
			UPDATE baton.workers SET expires_at = now() - interval '1 millisecond' WHERE instance_id = ?)
		UPDATE baton.tasks SET lease_expires_at = now() WHERE owner = ?`, id, id); err != nil {
		t.Fatal(err)
	}
}

// Three live workers; one dies holding four busy partitions. The two
// survivors, which hold the four others, each take their share of the
// dead worker's partitions at the takeover (a share of 4 each: 8 busy
// partitions over 2 live workers), rather than the first to notice taking
// all four, confirming them, and handing two back.
func TestTakeoverSpreadsOverTheSurvivors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	own, dead := keys("own", 4), keys("dead", 4)
	e.addWork(1_000_000, append(slices.Clone(own), dead...)...)
	registerGhost(t, e, "ghost#0001")
	for _, k := range dead {
		claimAsGhost(t, e, k, time.Hour)
	}
	ev := newEvents() // both survivors' events, told apart by Worker
	ids := map[string]string{}
	for _, name := range []string{"x", "y"} {
		cfg := fastConfig(name, ev)
		// A lease that a starved machine does not lose; the ghost's
		// leases are ended by the test, not by waiting.
		cfg.StaleAfter = 4 * time.Second
		cfg.MaxPartitions = 8
		cfg.RebalanceInterval = 100 * time.Millisecond
		// Only the share decides: the fall-back for a live worker that
		// does not take its part never comes within the test.
		cfg.SpreadTakeovers = time.Hour
		ids[e.start(cfg, busyProc()).InstanceID()] = name
	}
	// Three live workers and eight busy partitions: a share of 3, so x and
	// y hold the four others between them, each some.
	testutil.Eventually(t, 20*time.Second, "x and y each holding some of the four others", func() error {
		if held := e.heldBy(); held["x"]+held["y"] != 4 || held["x"] == 0 || held["y"] == 0 {
			return fmt.Errorf("held %v", held)
		}
		return nil
	})
	mark := len(ev.snapshot())
	killGhost(t, e, "ghost#0001")

	takers := map[string]int{} // by survivor name
	for _, k := range dead {
		c := ev.wait(t, 20*time.Second, "takeover of "+k, func(x distributor.Event) bool {
			return x.Kind == distributor.EventClaimed && x.Takeover && x.Key == k
		})
		takers[ids[c.Worker]]++
		// Its new owner processes it: confirmed, then 20 batches, through
		// many rebalances (every 100 ms) that would hand it back if its
		// owner held more than its share.
		for range 20 {
			ev.wait(t, 20*time.Second, "batches of "+k+" by "+ids[c.Worker], func(x distributor.Event) bool {
				return x.Kind == distributor.EventCheckpoint && x.Key == k && x.Worker == c.Worker
			})
		}
	}
	after := ev.snapshot()[mark:]
	dump := func() string {
		var b []string
		for _, x := range after {
			if x.Kind != distributor.EventCheckpoint {
				b = append(b, fmt.Sprintf("%s %s %s by %s reason=%s", x.At.Format("15:04:05.000"), x.Kind, x.Key, ids[x.Worker], x.Reason))
			}
		}
		return fmt.Sprint(b)
	}
	if takers["x"] == 0 || takers["y"] == 0 {
		t.Fatalf("the dead worker's partitions were taken over %v; want some by each survivor: %s", takers, dump())
	}
	lost := 0
	var handedBack []string
	for _, x := range after {
		switch {
		case x.Kind == distributor.EventLost || x.Kind == distributor.EventFenced:
			lost++
		case x.Kind == distributor.EventReleased && slices.Contains(dead, x.Key):
			handedBack = append(handedBack, x.Key+" ("+x.Reason+")")
		}
	}
	// A lease lost on a starved machine is taken again by either survivor,
	// and a hand-back may then be fair; without one, none is.
	if len(handedBack) > 0 && lost == 0 {
		t.Fatalf("the survivors released %v after taking them over; want each to keep its share: %s", handedBack, dump())
	}
	if lost > 0 {
		t.Logf("%d leases lost meanwhile (a starved machine); released after the takeover: %v", lost, handedBack)
	}
	testutil.Eventually(t, 20*time.Second, "x and y holding 4 each", func() error {
		if held := e.heldBy(); held["x"] != 4 || held["y"] != 4 {
			return fmt.Errorf("held %v", held)
		}
		return nil
	})
}

// A live worker that takes nothing (at its own MaxPartitions, say, or
// stuck) does not make a dead worker's partitions wait for it: the part
// left to it is taken by the others once they have seen it waiting for
// SpreadTakeovers.
func TestTakeoverLeftToAWorkerThatDoesNotTakeItIsTakenAfterAWhile(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dead := keys("dead", 2)
	e.addWork(1_000_000, dead...)
	registerGhost(t, e, "idle#0001") // live, holding nothing, never claiming
	registerGhost(t, e, "ghost#0001")
	for _, k := range dead {
		claimAsGhost(t, e, k, time.Hour)
	}
	ev := newEvents()
	cfg := fastConfig("x", ev)
	cfg.StaleAfter = 4 * time.Second
	cfg.MaxPartitions = 8
	cfg.SpreadTakeovers = 300 * time.Millisecond
	d := e.start(cfg, busyProc())
	killGhost(t, e, "ghost#0001")
	// Two live workers, two busy partitions: x's share is one, and the
	// other is left to the idle worker for 300 ms, then taken by x.
	for _, k := range dead {
		ev.wait(t, 20*time.Second, "takeover of "+k+" by x", func(x distributor.Event) bool {
			return x.Kind == distributor.EventConfirmed && x.Key == k && x.Worker == d.InstanceID()
		})
	}
}
