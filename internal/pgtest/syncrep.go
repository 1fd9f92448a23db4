package pgtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pglocal"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/schema"
)

// SyncRep is a private primary (a server of its own, not the shared test
// server: its settings are server-wide) with a real synchronous standby
// that has been stopped, so that every commit on the primary waits for
// the standby until the server cancels the wait. It is how a test makes
// PostgreSQL report a commit as not replicated (dbconn.ErrNotReplicated):
// cancel or terminate a session waiting at its COMMIT.
type SyncRep struct {
	Primary *pglocal.Server
	admin   *pgx.Conn
}

// StartSyncRep starts the primary, creates database "baton" migrated with
// sets (none: the core set), starts a standby named in the primary's
// synchronous_standby_names, waits until it is synchronous, and stops it.
// Everything is removed when the test ends.
func StartSyncRep(t testing.TB, sets ...*schema.Set) *SyncRep {
	t.Helper()
	if os.Getenv("TEST_DATABASE_URL") != "" {
		t.Skip("needs private servers (TEST_DATABASE_URL is set)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base, err := os.MkdirTemp("", "baton-syncrep-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	// The private servers turn synchronous_commit off for speed; waiting
	// for the standby needs it on.
	settings := map[string]string{"synchronous_commit": "on"}
	primary, err := pglocal.Start(ctx, pglocal.Options{Dir: filepath.Join(base, "primary"), Settings: settings})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { primary.Stop(pglocal.Immediate) })
	if _, err := primary.Tool("pg_basebackup"); err != nil {
		// The npm builds of 16–18 have no pg_basebackup, and 15's refuses
		// a newer server.
		t.Skipf("needs a standby: %v", err)
	}
	admin, err := pgx.Connect(ctx, primary.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	if _, err := admin.Exec(ctx, "CREATE DATABASE baton"); err != nil {
		t.Fatal(err)
	}
	db, err := dbconn.Open(primary.URL("baton"), dbconn.Options{MaxOpenConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	_, err = schema.Migrate(ctx, db, schema.Config{Sets: append([]*schema.Set{schema.Core}, sets...)})
	db.Close()
	if err != nil {
		t.Fatalf("migrating the primary: %v", err)
	}
	standby, err := primary.StartStandby(ctx, filepath.Join(base, "standby"),
		pglocal.Options{Settings: map[string]string{"synchronous_commit": "on", "cluster_name": "standby1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { standby.Stop(pglocal.Immediate) })
	for _, q := range []string{"ALTER SYSTEM SET synchronous_standby_names = 'standby1'", "SELECT pg_reload_conf()"} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	// pg_stat_replication offers no notification: poll it.
	testutil.Eventually(t, time.Minute, "the standby streaming synchronously", func() error {
		var state string
		if err := admin.QueryRow(ctx, `SELECT coalesce(max(sync_state), '') FROM pg_stat_replication
			WHERE application_name = 'standby1' AND state = 'streaming'`).Scan(&state); err != nil {
			t.Fatal(err)
		}
		if state != "sync" {
			return fmt.Errorf("standby is %q", state)
		}
		return nil
	})
	standby.Stop(pglocal.Immediate)
	return &SyncRep{Primary: primary, admin: admin}
}

// URL is the primary's URL for database "baton".
func (s *SyncRep) URL() string { return s.Primary.URL("baton") }

// WaitingAtCommit waits until a session whose application_name is app
// waits for the synchronous standby (wait event SyncRep), and returns its
// process id.
func (s *SyncRep) WaitingAtCommit(t testing.TB, app string) int {
	t.Helper()
	var pid int
	testutil.Eventually(t, time.Minute, "a session of "+app+" waiting for the standby", func() error {
		err := s.admin.QueryRow(context.Background(), `SELECT pid FROM pg_stat_activity
			WHERE application_name = $1 AND wait_event = 'SyncRep' LIMIT 1`, app).Scan(&pid)
		if err == pgx.ErrNoRows {
			return fmt.Errorf("none yet")
		}
		if err != nil {
			t.Fatal(err)
		}
		return nil
	})
	return pid
}

// Cancel cancels pid's wait for the standby (pg_cancel_backend): the
// server warns that the commit is local only and the COMMIT succeeds.
// With terminate, the server ends the session after the warning
// (pg_terminate_backend): the COMMIT's reply never comes.
func (s *SyncRep) Cancel(t testing.TB, pid int, terminate bool) {
	t.Helper()
	fn := "pg_cancel_backend"
	if terminate {
		fn = "pg_terminate_backend"
	}
	var ok bool
	if err := s.admin.QueryRow(context.Background(), "SELECT "+fn+"($1)", pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("%s(%d): %v, %v", fn, pid, ok, err)
	}
}

// CancelAllWaiting cancels every session waiting for the standby, over
// and over until ctx ends: the commits go through, each reported as not
// replicated. It returns when ctx ends.
func (s *SyncRep) CancelAllWaiting(ctx context.Context, t testing.TB) {
	conn, err := pgx.Connect(ctx, s.Primary.URL("postgres"))
	if err != nil {
		if ctx.Err() == nil {
			t.Errorf("connecting to cancel waits: %v", err)
		}
		return
	}
	defer conn.Close(context.Background())
	tick := time.NewTicker(testutil.PollInterval)
	defer tick.Stop()
	for {
		if _, err := conn.Exec(ctx, `SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'`); err != nil {
			if ctx.Err() == nil {
				t.Errorf("cancelling waits for the standby: %v", err)
			}
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// DropStandbys empties the primary's synchronous_standby_names and
// reloads its configuration, as an HA manager does when it finds the
// standby unhealthy (pg_auto_failover's wait_primary): commits stop
// waiting, and those waiting are released without a warning.
func (s *SyncRep) DropStandbys(t testing.TB) {
	t.Helper()
	for _, q := range []string{"ALTER SYSTEM SET synchronous_standby_names = ''", "SELECT pg_reload_conf()"} {
		if _, err := s.admin.Exec(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
}
