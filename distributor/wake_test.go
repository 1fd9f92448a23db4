package distributor_test

import (
	"testing"
	"time"

	"github.com/batonhq/baton/distributor"
)

// A worker records how it learns of new work: listening by default on a
// direct connection, polling with PollOnly, and a polling worker still
// finds work that arrives after it started.
func TestWakeModeIsRecordedAndPollingFindsWork(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ev := newEvents()
	cfg := fastConfig("poller", ev)
	cfg.PollOnly = true
	poller := e.start(cfg, newProc())
	listener := e.start(fastConfig("listener", ev), newProc())
	for id, want := range map[string]string{poller.InstanceID(): "poll", listener.InstanceID(): "listen"} {
		var got string
		if err := e.db.QueryRow(`SELECT wake FROM baton.workers WHERE instance_id = ?`, id).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("worker %s wakes by %q, want %q", id, got, want)
		}
	}
	listener.Stop()
	e.addWork(30, "late")
	ev.wait(t, 30*time.Second, "the polling worker to price work added after it started", func(x distributor.Event) bool {
		return x.Kind == distributor.EventCheckpoint && x.Key == "late" && x.Position == 30
	})
	e.verify()
}
