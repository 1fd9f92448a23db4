package distributor_test

import (
	"context"
	"testing"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pgtest"
)

// Batches whose commits the server stops waiting for the synchronous
// standby to confirm (the standby is down and every wait is cancelled, as
// an HA manager's wait_primary does) are reported one event each, with
// their partition and checkpoint, and counted on the handle; processing
// goes on, exactly once.
func TestBatchesNotConfirmedByStandbyAreReported(t *testing.T) {
	rep := pgtest.StartSyncRep(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); rep.CancelAllWaiting(ctx, t) }()
	t.Cleanup(func() { cancel(); <-done })

	e := &env{t: t, dsn: rep.URL(), db: pgtest.OpenDB(t, rep.URL(), dbconn.Options{MaxOpenConns: 4})}
	if _, err := e.db.Exec(`CREATE TABLE test_output (
		key text NOT NULL, n bigint NOT NULL, owner text NOT NULL, version bigint NOT NULL,
		PRIMARY KEY (key, n))`); err != nil {
		t.Fatal(err)
	}
	ks := keys("nr", 3)
	e.addWork(25, ks...)
	ev := newEvents()
	cfg := fastConfig("w1", ev)
	cfg.UntilDone = true
	cfg.StaleAfter = 10 * time.Second // every commit waits for a cancel: no lease may lapse meanwhile
	d := e.start(cfg, newProc())
	if err := waitDone(t, d, time.Minute); err != nil {
		t.Fatal(err)
	}
	e.verify()
	checkpoints := ev.count(kind(distributor.EventCheckpoint))
	for _, k := range ks {
		if ev.count(func(x distributor.Event) bool {
			return x.Kind == distributor.EventNotReplicated && x.Key == k && x.Position > 0
		}) == 0 {
			t.Errorf("no not_replicated event for %s; events:\n%s", k, ev.dump())
		}
	}
	if n := ev.count(kind(distributor.EventNotReplicated)); n != checkpoints {
		t.Errorf("%d not_replicated events for %d committed batches; events:\n%s", n, checkpoints, ev.dump())
	}
	if e.db.NotReplicatedCommits() == 0 {
		t.Error("the handle counted no commit not replicated, though its CREATE TABLE and AddWorks waited for the standby")
	}
}
