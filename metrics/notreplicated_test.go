package metrics

import (
	"testing"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pgtest"
)

// A commit the server reports as not confirmed by the synchronous standby
// is counted by the handle's counter; a batch reported so by the
// distributor by the batch counter.
func TestNotReplicatedCommitsAreCounted(t *testing.T) {
	rep := pgtest.StartSyncRep(t)
	db := pgtest.OpenDB(t, rep.URL(), dbconn.Options{ApplicationName: "metrics-test", MaxOpenConns: 1})
	m := New()
	m.WatchDB(db)
	if got := gauges(t, m)["baton_commits_not_replicated_total"]; got != 0 {
		t.Fatalf("baton_commits_not_replicated_total = %v before any commit", got)
	}
	done := make(chan error, 1)
	go func() {
		_, err := db.Exec("CREATE TABLE t (x int)")
		done <- err
	}()
	rep.Cancel(t, rep.WaitingAtCommit(t, "metrics-test"), false)
	if err := <-done; err != nil {
		t.Fatalf("the commit whose wait was cancelled: %v", err)
	}
	m.OnEvent(distributor.Event{Kind: distributor.EventNotReplicated, Key: "c1", Position: 10})
	g := gauges(t, m)
	if got := g["baton_commits_not_replicated_total"]; got != 1 {
		t.Errorf("baton_commits_not_replicated_total = %v, want 1", got)
	}
	if got := g["baton_batches_not_replicated_total"]; got != 1 {
		t.Errorf("baton_batches_not_replicated_total = %v, want 1", got)
	}
}

// Other warnings are not mistaken for it.
func TestOtherWarningsAreNotCounted(t *testing.T) {
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{MaxOpenConns: 1})
	for _, q := range []string{
		`DO $$ BEGIN RAISE WARNING 'canceling nothing'; END $$`,
		`DO $$ BEGIN RAISE NOTICE 'canceling wait for synchronous replication' USING DETAIL = 'has already committed locally'; END $$`,
		// What an immediate shutdown sends every session: 57P01 too.
		`DO $$ BEGIN RAISE WARNING 'terminating connection due to immediate shutdown command' USING ERRCODE = 'admin_shutdown'; END $$`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	if n := db.NotReplicatedCommits(); n != 0 {
		t.Errorf("NotReplicatedCommits = %d after a plain WARNING, a NOTICE and an immediate shutdown's warning, want 0", n)
	}
}
