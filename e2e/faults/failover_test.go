package faults

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/pricing/pricingschema"

	"github.com/jackc/pgx/v5"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pglocal"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/schema"
)

// pair is a primary with one streaming standby, and the multi-host URL
// workers use to follow whichever of them accepts writes.
type pair struct {
	primary, standby *pglocal.Server
	url              string
}

// startPair starts a primary with a migrated database "baton" and a
// standby made with pg_basebackup -R; synchronous makes the standby
// synchronous (synchronous_standby_names = '*').
func startPair(t *testing.T, synchronous bool) *pair {
	t.Helper()
	ctx := t.Context()
	base, err := os.MkdirTemp("", "baton-failover-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	// The private server turns synchronous_commit off for speed; a
	// synchronous standby needs it on.
	settings := map[string]string{"synchronous_commit": "on"}
	primary, err := pglocal.Start(ctx, pglocal.Options{Dir: filepath.Join(base, "primary"), Settings: settings})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { primary.Stop(pglocal.Immediate) })
	admin, err := pgx.Connect(ctx, primary.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "CREATE DATABASE baton"); err != nil {
		t.Fatal(err)
	}
	db, err := dbconn.Open(primary.URL("baton"), dbconn.Options{MaxOpenConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	_, err = schema.Migrate(ctx, db, schema.Config{Sets: []*schema.Set{schema.Core, pricingschema.Set}})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	standby, err := primary.StartStandby(ctx, filepath.Join(base, "standby"), pglocal.Options{Settings: settings})
	if errors.Is(err, pglocal.ErrNoTool) {
		t.Skipf("needs a standby: %v", err) // PostgreSQL 16–18 from npm: no pg_basebackup
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { standby.Stop(pglocal.Immediate) })
	want := "async"
	if synchronous {
		// Only now: with no standby connected, every commit would wait.
		want = "sync"
		if _, err := admin.Exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = '*'"); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
			t.Fatal(err)
		}
	}
	// pg_stat_replication offers no notification: poll it.
	testutil.Eventually(t, time.Minute, "the standby streaming "+want, func() error {
		var state string
		err := admin.QueryRow(ctx, `SELECT coalesce(max(sync_state), '') FROM pg_stat_replication WHERE state = 'streaming'`).Scan(&state)
		if err != nil {
			t.Fatal(err)
		}
		if state != want {
			return fmt.Errorf("standby is %q", state)
		}
		return nil
	})
	return &pair{primary: primary, standby: standby, url: fmt.Sprintf(
		"postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/baton?sslmode=disable&target_session_attrs=read-write",
		primary.Port(), standby.Port())}
}

// syncWaitsCancelled counts the commits whose wait for the synchronous
// standby the server cancelled (each logs a WARNING saying the transaction
// "has already committed locally, but might not have been replicated").
func syncWaitsCancelled(serverLog string) (int, error) {
	b, err := os.ReadFile(serverLog)
	if err != nil {
		return 0, fmt.Errorf("reading the primary's log: %w", err)
	}
	return strings.Count(string(b), "might not have been replicated to the standby"), nil
}

// pricedAsOf counts priced records and reads the database clock in one
// snapshot.
func (r *run) pricedAsOf() (n int64, at time.Time) {
	r.t.Helper()
	if err := r.db.QueryRow(`SELECT count(*), now() FROM baton.priced`).Scan(&n, &at); err != nil {
		r.t.Fatal(err)
	}
	return n, at
}

// failover kills the primary (immediate shutdown, as a crash), promotes
// the standby, waits until the test's own connections reach it, and
// returns the time the promotion completed.
func (r *run) failover(p *pair) time.Time {
	r.t.Helper()
	p.primary.Stop(pglocal.Immediate)
	r.stats.fault("primary_killed")
	if err := p.standby.Promote(r.t.Context()); err != nil {
		r.t.Fatal(err)
	}
	// The servers run on this machine: its clock is the database's.
	promoted := time.Now()
	// The test's own pool still holds connections to the dead primary: each
	// fails once and is discarded, then the URL leads to the new primary.
	testutil.Eventually(r.t, 30*time.Second, "the new primary answering", func() error {
		var now time.Time
		return r.db.QueryRow(`SELECT now()`).Scan(&now)
	})
	return promoted
}

// resumed reports how long after the promotion the first batch committed on
// the new primary.
func (r *run) resumed(promoted time.Time) time.Duration {
	r.t.Helper()
	var first *time.Time
	if err := r.db.QueryRow(`SELECT min(priced_at) FROM baton.priced WHERE priced_at >= ?`, promoted).Scan(&first); err != nil {
		r.t.Fatal(err)
	}
	if first == nil {
		r.t.Fatal("nothing was priced after the promotion")
	}
	return first.Sub(promoted)
}

// The primary dies mid-run and its synchronous standby is promoted:
// workers on a multi-host URL with target_session_attrs=read-write follow
// it, nothing committed is lost, and every record is priced exactly once.
func TestPrimaryFailoverToSynchronousStandby(t *testing.T) {
	p := startPair(t, true)
	r := newRunOn(t, scenarioSeed(t), p.url)
	r.seedData(size())
	for range 3 {
		r.start(r.dsn)
	}
	r.waitProgress(0.3 + 0.3*r.rng.Float64())
	before, at := r.pricedAsOf()
	promoted := r.failover(p)
	// Every batch committed before the kill survived it.
	var kept int64
	if err := r.db.QueryRow(`SELECT count(*) FROM baton.priced WHERE priced_at <= ?`, at).Scan(&kept); err != nil {
		t.Fatal(err)
	}
	if kept < before {
		// PostgreSQL makes a commit visible on the primary, unreplicated,
		// when its wait for the standby is cancelled (a statement timeout,
		// or a client giving up on a commit on a loaded machine), and says
		// so in its log. Such a commit was never acknowledged as
		// replicated and may be lost with the primary: the workers then
		// process it again on the standby, which the exactly-once check
		// below still covers. Any other loss is the standby's failure.
		cancelled, err := syncWaitsCancelled(filepath.Join(p.primary.Dir(), "server.log"))
		if err != nil {
			t.Fatal(err)
		}
		if cancelled == 0 {
			t.Fatalf("the synchronous standby lost committed batches: %d priced records before the kill, %d after", before, kept)
		}
		t.Logf("%d priced records before the kill, %d after: the primary's log shows %d synchronous-replication waits cancelled, whose commits were visible there unreplicated",
			before, kept, cancelled)
	}
	r.waitAll(3 * time.Minute)
	r.check()
	t.Logf("sync failover: %d records priced before the kill, %d of them kept; first batch on the new primary %s after the promotion",
		before, min(kept, before), r.resumed(promoted).Round(time.Millisecond))
}

// The same with an asynchronous standby that lags: the tail of batches the
// primary committed but had not yet sent is lost with their checkpoints, so
// the new primary is a consistent earlier state, and the workers price
// that tail again there. The surviving database is still exactly once.
//
// The lag is made certain by stopping the standby's WAL receiver (SIGSTOP)
// while the primary goes on committing.
func TestPrimaryFailoverToAsynchronousStandbyLosesATail(t *testing.T) {
	p := startPair(t, false)
	r := newRunOn(t, scenarioSeed(t), p.url)
	r.seedData(size())
	for range 3 {
		r.start(r.dsn)
	}
	r.waitProgress(0.2 + 0.2*r.rng.Float64())
	receiver := walReceiverPID(t, p.standby)
	if err := syscall.Kill(receiver, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// From here on nothing reaches the standby. Let the primary commit a
	// fifth of the work more.
	done, total := r.progress()
	r.waitProgress(float64(min(total, done+total/5)) / float64(total))
	before, at := r.pricedAsOf()
	if err := syscall.Kill(receiver, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	promoted := r.failover(p)
	var kept int64
	if err := r.db.QueryRow(`SELECT count(*) FROM baton.priced WHERE priced_at <= ?`, at).Scan(&kept); err != nil {
		t.Fatal(err)
	}
	lost := before - kept
	if lost <= 0 || kept == 0 {
		t.Fatalf("priced before the kill %d, on the promoted standby %d: want a lost tail", before, kept)
	}
	r.waitAll(3 * time.Minute)
	r.check()
	t.Logf("async failover: %d of %d priced records (with their checkpoints) lost with the primary and priced again; first batch on the new primary %s after the promotion",
		lost, before, r.resumed(promoted).Round(time.Millisecond))
}

// walReceiverPID is the process id of a standby's WAL receiver.
func walReceiverPID(t *testing.T, standby *pglocal.Server) int {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), standby.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var pid int
	if err := conn.QueryRow(t.Context(), `SELECT pid FROM pg_stat_wal_receiver`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}
