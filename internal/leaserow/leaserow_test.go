package leaserow_test

import (
	"context"
	"errors"
	"github.com/batonhq/baton/internal/leaseinfo"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/uptrace/bun"
	"go.uber.org/goleak"

	"github.com/batonhq/baton/internal/leaserow"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/partition"
)

// The tests leave no goroutine behind (the server is torn down first).
func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.WithServer(m)) }

// The renewal statement's own text, to find it waiting in
// pg_stat_activity.
const renewMarker = "FOR NO KEY UPDATE OF t"

// leaderships is a database with leaderships a, b and c held by w1 at
// version 1 (leases of a minute), and w1's view of the table. (The
// conformance suite, internal/storetest's lease cases, runs the contract
// on both lease tables as schedule and leader configure them.)
func leaderships(t *testing.T) (*bun.DB, *leaserow.Table, []partition.Lease) {
	t.Helper()
	db := pgtest.NewDB(t)
	if _, err := db.ExecContext(context.Background(), `INSERT INTO baton.leaderships
		(name, version, owner, elected_at, heartbeat_at, lease_expires_at)
		SELECT n, 1, 'w1', now(), now(), now() + interval '1 minute' FROM unnest(ARRAY['a', 'b', 'c']) n`); err != nil {
		t.Fatal(err)
	}
	tbl := &leaserow.Table{DB: db, Table: `"baton".leaderships`, Key: "name", Owner: "w1", TTL: time.Minute}
	return db, tbl, []partition.Lease{{Key: "a", Version: 1}, {Key: "b", Version: 1}, {Key: "c", Version: 1}}
}

func renewedKeys(rs []leaseinfo.Renewal) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Key)
	}
	slices.Sort(out)
	return out
}

// begin opens a transaction that the test ends (rolled back at the
// latest when the test does).
func begin(t *testing.T, db *bun.DB) bun.Tx {
	t.Helper()
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	return tx
}

// A renewal writes the database's clock: heartbeat_at is the statement's
// now() and the lease ends exactly TTL later, to the microsecond.
func TestRenewWritesTheDatabaseClock(t *testing.T) {
	t.Parallel()
	db, tbl, ls := leaderships(t)
	tbl.TTL = 37*time.Second + 123456*time.Microsecond
	if _, err := db.Exec(`UPDATE baton.leaderships SET heartbeat_at = now() - interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	rs, err := tbl.Renew(context.Background(), ls[:2])
	if err != nil {
		t.Fatal(err)
	}
	if got := renewedKeys(rs); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("renewed %v; want a and b", got)
	}
	rows, err := db.Query(`SELECT name, (extract(epoch FROM lease_expires_at - heartbeat_at) * 1000000)::bigint,
		heartbeat_at > now() - interval '1 minute' FROM baton.leaderships ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var micros int64
		var recent bool
		if err := rows.Scan(&name, &micros, &recent); err != nil {
			t.Fatal(err)
		}
		renewed := name != "c"
		if recent != renewed {
			t.Errorf("%s: heartbeat_at recent %v; want %v", name, recent, renewed)
		}
		if d := time.Duration(micros) * time.Microsecond; renewed && d != tbl.TTL {
			t.Errorf("%s: lease ends %v after its heartbeat; want exactly %v", name, d, tbl.TTL)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// A fenced run holds its row FOR KEY SHARE until it commits; the renewal
// locks FOR NO KEY UPDATE, which does not conflict, so it renews at once,
// without waiting for the run. Were it to wait, the connection's lock
// timeout would end it with an error.
func TestRenewDoesNotWaitForAFencedRun(t *testing.T) {
	t.Parallel()
	db, tbl, ls := leaderships(t)
	run := begin(t, db)
	var n int
	if err := run.QueryRow(`SELECT count(*) FROM (SELECT 1 FROM baton.leaderships
		WHERE name IN ('a', 'b', 'c') AND version = 1 AND owner = 'w1' FOR KEY SHARE) f`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("fence: %d rows, %v", n, err)
	}
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if _, err := conn.ExecContext(ctx, `SET lock_timeout = '5s'`); err != nil {
		t.Fatal(err)
	}
	tbl.DB = conn
	rs, err := tbl.Renew(ctx, ls)
	if err != nil {
		t.Fatalf("renewal under a fenced run: %v", err)
	}
	if got := renewedKeys(rs); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("renewed %v under a fenced run; want a, b and c", got)
	}
	hs, err := tbl.Inspect(ctx, ls)
	if err != nil || len(hs) != 3 {
		t.Fatalf("re-read under a fenced run: %v, %v", hs, err)
	}
}

// The renewal locks its rows in key order, whatever the order of the
// leases it is given: held up at b by a change of ownership's FOR UPDATE,
// it already holds a, so that two renewals (or a renewal and a claim
// taking rows in key order) cannot deadlock. Once the change of ownership
// commits elsewhere (here: rolls back), the renewal goes on.
func TestRenewLocksInKeyOrder(t *testing.T) {
	t.Parallel()
	db, tbl, ls := leaderships(t)
	claim := begin(t, db)
	if _, err := claim.Exec(`SELECT 1 FROM baton.leaderships WHERE name = 'b' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	type result struct {
		rs  []leaseinfo.Renewal
		err error
	}
	done := make(chan result, 1)
	go func() {
		rs, err := tbl.Renew(context.Background(), []partition.Lease{ls[2], ls[1], ls[0]})
		done <- result{rs, err}
	}()
	pgtest.WaitForLockWait(t, db, renewMarker)
	// The renewal waits at b, holding a (and not yet c).
	other := begin(t, db)
	_, err := other.Exec(`SELECT 1 FROM baton.leaderships WHERE name = 'a' FOR UPDATE NOWAIT`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		t.Errorf("locking a while the renewal waits at b: %v; want lock_not_available (55P03): a is locked first", err)
	}
	_ = other.Rollback()
	if _, err := db.Exec(`SELECT 1 FROM baton.leaderships WHERE name = 'c' FOR UPDATE NOWAIT`); err != nil {
		t.Errorf("locking c while the renewal waits at b: %v; want it free (c comes after b)", err)
	}
	if err := claim.Rollback(); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if got := renewedKeys(r.rs); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("renewed %v; want a, b and c", got)
	}
}

// No leases: nothing is sent to the database (the table's handle is not
// even touched) and nothing is returned.
func TestEmptyInputSendsNothing(t *testing.T) {
	t.Parallel()
	tbl := &leaserow.Table{Table: `"baton".leaderships`, Key: "name", Owner: "w1", TTL: time.Minute}
	if rs, err := tbl.Renew(context.Background(), nil); rs != nil || err != nil {
		t.Errorf("Renew(nil) = %v, %v; want nothing", rs, err)
	}
	if hs, err := tbl.Inspect(context.Background(), []partition.Lease{}); hs != nil || err != nil {
		t.Errorf("Inspect(empty) = %v, %v; want nothing", hs, err)
	}
}

// A cancelled context ends the statement with an error that says what was
// being done and wraps the cancellation; nothing is renewed.
func TestCancelledContext(t *testing.T) {
	t.Parallel()
	db, tbl, ls := leaderships(t)
	if _, err := db.Exec(`UPDATE baton.leaderships SET lease_expires_at = now() + interval '10 seconds'`); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tbl.Renew(ctx, ls); !errors.Is(err, context.Canceled) ||
		!strings.HasPrefix(err.Error(), `renewing 3 "baton".leaderships leases: `) {
		t.Errorf("Renew with a cancelled context: %v; want a wrapped context.Canceled saying it was renewing 3 leases", err)
	}
	if _, err := tbl.Inspect(ctx, ls); !errors.Is(err, context.Canceled) ||
		!strings.HasPrefix(err.Error(), `re-reading 3 "baton".leaderships leases: `) {
		t.Errorf("Inspect with a cancelled context: %v; want a wrapped context.Canceled saying it was re-reading 3 leases", err)
	}
	var renewed int
	if err := db.QueryRow(`SELECT count(*) FROM baton.leaderships
		WHERE lease_expires_at > now() + interval '10 seconds'`).Scan(&renewed); err != nil || renewed != 0 {
		t.Errorf("%d leases renewed by a cancelled renewal (%v); want none", renewed, err)
	}
}

// A statement the database refuses (here: the table is gone) returns the
// server's error, wrapped with what was being done.
func TestDroppedTable(t *testing.T) {
	t.Parallel()
	db, tbl, ls := leaderships(t)
	if _, err := db.Exec(`DROP TABLE baton.leaderships`); err != nil {
		t.Fatal(err)
	}
	for what, call := range map[string]func() error{
		`renewing 2 "baton".leaderships leases: `: func() error { _, err := tbl.Renew(context.Background(), ls[:2]); return err },
		`re-reading 2 "baton".leaderships leases: `: func() error {
			_, err := tbl.Inspect(context.Background(), ls[:2])
			return err
		},
	} {
		err := call()
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42P01" || !strings.HasPrefix(err.Error(), what) {
			t.Errorf("%v; want undefined_table (42P01) wrapped as %q…", err, what)
		}
	}
}
