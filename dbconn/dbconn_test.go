package dbconn_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/pgxconn"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var opts = dbconn.Options{StatementTimeout: 7 * time.Second, LockTimeout: 3 * time.Second, IdleInTransactionTimeout: 5 * time.Second}

// settings reads the three timeouts inside a transaction begun by BeginTx.
func settings(t *testing.T, dsn string) (pooled bool, got string) {
	t.Helper()
	ctx := context.Background()
	db := pgtest.OpenDB(t, dsn, opts)
	if err := dbconn.Ping(ctx, db, dsn); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := tx.QueryRowContext(ctx, `SELECT current_setting('statement_timeout') || ' ' ||
		current_setting('lock_timeout') || ' ' || current_setting('idle_in_transaction_session_timeout')`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	return db.Pooled(), got
}

// Directly, the timeouts are session settings; through a transaction
// pooler, which rejects them as startup parameters, the handle falls back
// to setting them in each transaction. Either way a transaction has them.
func TestTimeoutsHoldDirectAndThroughATransactionPooler(t *testing.T) {
	dsn := pgtest.NewURL(t)
	const want = "7s 3s 5s"
	if pooled, got := settings(t, dsn); pooled || got != want {
		t.Fatalf("direct: pooled %v, timeouts %q; want false, %q", pooled, got, want)
	}
	b := pgtest.StartBouncer(t)
	via := pgtest.BouncerURL(t, b, dsn)
	if pooled, got := settings(t, via); !pooled || got != want {
		t.Fatalf("through PgBouncer: pooled %v, timeouts %q; want true, %q", pooled, got, want)
	}

	// A statement abandoned by its context is not cancelled through the
	// pooler (PgBouncer 1.18 can exit on a cancel connection closed early):
	// its connection is closed instead, and the pooler carries on.
	db := pgtest.Open(t, via, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err := db.ExecContext(ctx, "SELECT pg_sleep(3)")
	cancel()
	if err == nil {
		t.Fatal("a statement outliving its context succeeded")
	}
	if _, err := db.ExecContext(context.Background(), "SELECT 1"); err != nil {
		t.Fatalf("after an abandoned statement: %v", err)
	}
	if log := b.Log(); strings.Contains(log, "cancel request") {
		t.Fatalf("a cancel request went through the pooler:\n%s", log)
	}
}

// Through a transaction pooler, every way of beginning a transaction
// through database/sql or bun sets the handle's timeouts for it, keeps the
// isolation level and access mode asked for, and leaves raw pgx access to
// the connection working.
func TestEveryTransactionThroughAPoolerHasTheTimeouts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.NewURL(t)
	db := pgtest.OpenDB(t, pgtest.Bouncer(t, dsn), opts)
	if err := dbconn.Ping(ctx, db, dsn); err != nil {
		t.Fatal(err)
	}
	if !db.Pooled() {
		t.Fatal("not in pooled mode behind PgBouncer")
	}
	const query = `SELECT current_setting('statement_timeout') || ' ' || current_setting('lock_timeout') || ' ' ||
		current_setting('idle_in_transaction_session_timeout') || ' ' || current_setting('transaction_isolation') || ' ' ||
		current_setting('transaction_read_only')`
	read := func(tx bun.Tx) string {
		t.Helper()
		var got string
		if err := tx.QueryRowContext(ctx, query).Scan(&got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	const want = "7s 3s 5s read committed off"
	check := func(how, got, want string) {
		t.Helper()
		if got != want {
			t.Errorf("%s: %q, want %q", how, got, want)
		}
	}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	check("db.BeginTx", read(tx), want)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	var got string
	if err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error { got = read(tx); return nil }); err != nil {
		t.Fatal(err)
	}
	check("db.RunInTx", got, want)

	if err := db.RunInTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true},
		func(ctx context.Context, tx bun.Tx) error { got = read(tx); return nil }); err != nil {
		t.Fatal(err)
	}
	check("db.RunInTx, repeatable read, read only", got, "7s 3s 5s repeatable read on")

	tx, err = db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelSerializable})
	if err != nil {
		t.Fatal(err)
	}
	check("DB.BeginTx, serializable", read(tx), "7s 3s 5s serializable off")
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}

	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tx, err = conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	check("bun.Conn.BeginTx", read(tx), want)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	// Outside a transaction nothing is left set on the server session.
	if err := conn.QueryRowContext(ctx, `SELECT current_setting('idle_in_transaction_session_timeout')`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	check("after the transaction", got, "0")
	if err := pgxconn.Raw(conn.Conn, func(pc *pgx.Conn) error {
		return pc.QueryRow(ctx, "SELECT 'raw'").Scan(&got)
	}); err != nil {
		t.Fatal(err)
	}
	check("raw pgx access", got, "raw")
}

// A database URL that does not parse is reported without its password,
// whatever characters the password holds.
func TestOpenHidesThePasswordOfAURLThatDoesNotParse(t *testing.T) {
	for _, c := range []struct{ dsn, secret string }{
		{"postgres://u:S3cret x@host/db", "cret x"},
		{"postgres://u:S3cret x@host:notaport/db", "cret x"},
		{"postgres://u:p@ss/w#rd?x@host:notaport/db", "ss/w#rd"},
		{"postgres://u:p%40ss%20w0rd@host:notaport/db", "ss%20w0rd"},
		{"host=db user=u password='S3cret x' port=notaport", "cret x"},
	} {
		_, err := dbconn.Open(c.dsn, dbconn.Options{})
		if err == nil {
			t.Errorf("%s: opened", dbconn.Redact(c.dsn))
			continue
		}
		if strings.Contains(err.Error(), c.secret) || !strings.Contains(err.Error(), "xxxxx") {
			t.Errorf("error leaks the password or masks nothing: %v", err)
		}
		if r := dbconn.Redact(c.dsn); strings.Contains(r, c.secret) || !strings.Contains(r, "xxxxx") {
			t.Errorf("Redact: %q", r)
		}
	}
}

// plain opens dsn as an application does, with database/sql over pgx.
func plain(t *testing.T, dsn string) *bun.DB {
	t.Helper()
	sqldb, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db := bun.NewDB(sqldb, pgdialect.New())
	t.Cleanup(func() { db.Close() })
	return db
}

// A handle the application opened itself, described as direct, is checked:
// one that reaches PostgreSQL itself is accepted, one that reaches PgBouncer
// is refused with an error that says how to describe it; described as
// pooled, the same handle is accepted as such.
func TestWrapRefusesAPooledHandleDescribedAsDirect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.NewURL(t)
	direct, err := dbconn.Wrap(ctx, plain(t, dsn), dbconn.Access{})
	if err != nil {
		t.Fatalf("wrapping a direct handle: %v", err)
	}
	if direct.Pooled() || !direct.Direct() || direct.LocalTimeouts() != "" {
		t.Errorf("direct handle: Pooled %v, Direct %v, LocalTimeouts %q; want false, true, none", direct.Pooled(), direct.Direct(), direct.LocalTimeouts())
	}

	via := pgtest.Bouncer(t, dsn)
	_, err = dbconn.Wrap(ctx, plain(t, via), dbconn.Access{})
	if !errors.Is(err, dbconn.ErrNotDirect) || !strings.Contains(err.Error(), "Pooled: true") {
		t.Fatalf("wrapping a handle through PgBouncer as direct: %v, want ErrNotDirect naming Access{Pooled: true}", err)
	}
	// A handle from Open that found the pooler is not direct either.
	opened := pgtest.OpenDB(t, via, dbconn.Options{})
	if err := dbconn.Ping(ctx, opened, via); err != nil {
		t.Fatal(err)
	}
	if _, err := dbconn.Wrap(ctx, opened.DB, dbconn.Access{}); !errors.Is(err, dbconn.ErrNotDirect) {
		t.Fatalf("wrapping Open's pooled handle as direct: %v, want ErrNotDirect", err)
	}

	pooled, err := dbconn.Wrap(ctx, plain(t, via), dbconn.Access{Pooled: true, ListenURL: dsn})
	if err != nil {
		t.Fatalf("wrapping a handle through PgBouncer as pooled: %v", err)
	}
	if !pooled.Pooled() || pooled.Direct() || pooled.ListenURL() != dsn {
		t.Errorf("pooled handle: Pooled %v, Direct %v, ListenURL %q", pooled.Pooled(), pooled.Direct(), pooled.ListenURL())
	}
}

// Wrap refuses what it cannot use, naming it, without connecting.
func TestWrapRejectsBadDescriptions(t *testing.T) {
	ctx := context.Background()
	if _, err := dbconn.Wrap(ctx, nil, dbconn.Access{Pooled: true}); err == nil || !strings.Contains(err.Error(), "nil") {
		t.Errorf("nil handle: %v", err)
	}
	db := plain(t, "postgres://u@127.0.0.1:1/none")
	if _, err := dbconn.Wrap(ctx, db, dbconn.Access{Pooled: true, LockTimeout: -time.Second}); err == nil || !strings.Contains(err.Error(), "LockTimeout") {
		t.Errorf("negative timeout: %v", err)
	}
	_, err := dbconn.Wrap(ctx, db, dbconn.Access{Pooled: true, ListenURL: "postgres://u:S3cret x@host:notaport/db"})
	if err == nil || !strings.Contains(err.Error(), "ListenURL") || strings.Contains(err.Error(), "cret x") {
		t.Errorf("bad listen URL: %v", err)
	}
	// Described as direct, it must connect to check; the error says what
	// it was doing.
	if _, err := dbconn.Wrap(ctx, db, dbconn.Access{}); err == nil || !strings.Contains(err.Error(), "check that the handle is direct") {
		t.Errorf("unreachable direct handle: %v", err)
	}
}

// A handle the application opened cannot carry the timeouts as startup
// parameters: every transaction baton begins on it sets them with SET
// LOCAL, through PgBouncer and directly, and leaves the session as it was.
func TestWrappedHandleSetsTheTimeoutsInEveryTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.NewURL(t)
	access := dbconn.Access{StatementTimeout: opts.StatementTimeout, LockTimeout: opts.LockTimeout,
		IdleInTransactionTimeout: opts.IdleInTransactionTimeout}
	direct, err := dbconn.Wrap(ctx, plain(t, dsn), access)
	if err != nil {
		t.Fatal(err)
	}
	access.Pooled = true
	pooled, err := dbconn.Wrap(ctx, plain(t, pgtest.Bouncer(t, dsn)), access)
	if err != nil {
		t.Fatal(err)
	}
	const query = `SELECT current_setting('statement_timeout') || ' ' || current_setting('lock_timeout') || ' ' ||
		current_setting('idle_in_transaction_session_timeout') || ' ' || current_setting('transaction_isolation')`
	for name, db := range map[string]*dbconn.DB{"direct": direct, "through PgBouncer": pooled} {
		read := func(q bun.IDB) string {
			t.Helper()
			var got string
			if err := q.QueryRowContext(ctx, query).Scan(&got); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return got
		}
		check := func(how, got, want string) {
			t.Helper()
			if got != want {
				t.Errorf("%s, %s: %q, want %q", name, how, got, want)
			}
		}
		if db.LocalTimeouts() == "" {
			t.Errorf("%s: no statement setting the timeouts", name)
		}
		tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelSerializable})
		if err != nil {
			t.Fatal(err)
		}
		check("DB.BeginTx", read(tx), "7s 3s 5s serializable")
		_ = tx.Rollback()

		var got string
		if err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error { got = read(tx); return nil }); err != nil {
			t.Fatal(err)
		}
		check("DB.RunInTx", got, "7s 3s 5s read committed")

		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tx, err = conn.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.SetLocalTimeouts(ctx, tx); err != nil {
			t.Fatal(err)
		}
		check("a connection's BeginTx, then SetLocalTimeouts", read(tx), "7s 3s 5s read committed")
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		// SET LOCAL ends with the transaction.
		check("after the transaction", read(conn), "0 0 0 read committed")
		conn.Close()
	}
}

// A server that refuses connections is said once, although pgx tries the
// host twice (TLS, then plain) and lists both attempts.
func TestPingSaysARefusedConnectionOnce(t *testing.T) {
	t.Parallel()
	dsn := "postgres://baton:secret@127.0.0.1:1/nowhere?connect_timeout=2"
	db, err := dbconn.Open(dsn, dbconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = dbconn.Ping(context.Background(), db, dsn)
	if err == nil {
		t.Fatal("Ping of a closed port succeeded")
	}
	msg := err.Error()
	if n := strings.Count(msg, "connection refused"); n != 1 || strings.Contains(msg, "secret") {
		t.Errorf("Ping error says connection refused %d times (want once, without the password):\n%s", n, msg)
	}
}
