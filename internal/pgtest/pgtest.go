// Package pgtest gives each test its own freshly migrated PostgreSQL
// database, so tests run in parallel against a real server.
//
// The server is TEST_DATABASE_URL when set (the role needs CREATEDB), else a
// private throwaway server started from the installed binaries on first use
// and removed when the test binary exits: those of the major version
// BATON_PG_VERSION when set (see pglocal.BinDir), which the server must
// then be, whichever it is. Each package's TestMain calls Main.
// Databases are cloned from a per-process template that has the schema
// applied, which takes milliseconds, and are dropped when their test ends.
package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pglocal"
	"github.com/batonhq/baton/schema"
)

var (
	once     sync.Once
	setupErr error
	server   *pglocal.Server // nil with an external server
	baseURL  *url.URL        // URL of the maintenance database
	admin    *sql.DB
	template string
	// versionNum is the server's server_version_num (170010 for 17.10).
	versionNum int
	createMu   sync.Mutex
	tempDir    string
	// extraSets are the migration sets the package's TestMain adds to
	// the core set.
	extraSets []*schema.Set
)

// Main runs the tests of a package, tears the server down and exits. Its
// databases have baton's core tables, and the tables of the migration
// sets given (a package of the pricing plug-in adds pricingschema.Set):
// the engine's tests run on the engine's schema alone.
func Main(m *testing.M, sets ...*schema.Set) { os.Exit(Run(m, sets...)) }

// WithServer wraps m for goleak.VerifyTestMain: running it runs the tests
// and tears the server down, so that the leak check that follows sees only
// what the tests left behind.
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.WithServer(m)) }
func WithServer(m *testing.M, sets ...*schema.Set) Runner { return Runner{m, sets} }

// Runner runs a package's tests with a server; see WithServer.
type Runner struct {
	m    *testing.M
	sets []*schema.Set
}

// Run runs the tests and tears the server down.
func (r Runner) Run() int { return Run(r.m, r.sets...) }

// Run runs the tests of a package, tears the server down and returns the
// exit code, for a TestMain with work of its own to do afterwards.
func Run(m *testing.M, sets ...*schema.Set) int {
	extraSets = sets
	code := m.Run()
	teardown()
	return code
}

func teardown() {
	if admin != nil {
		if template != "" {
			_, _ = admin.Exec("DROP DATABASE IF EXISTS " + quoteIdent(template) + " WITH (FORCE)")
		}
		admin.Close()
	}
	if server != nil {
		server.Stop(pglocal.Fast)
	}
	if tempDir != "" {
		os.RemoveAll(tempDir)
	}
}

func setup() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	raw := os.Getenv("TEST_DATABASE_URL")
	if raw == "" {
		dir, err := os.MkdirTemp("", "baton-pgtest-")
		if err != nil {
			return err
		}
		tempDir = dir
		if err := os.Chmod(dir, 0o755); err != nil {
			return err
		}
		server, err = pglocal.Start(ctx, pglocal.Options{Dir: dir + "/data"})
		if err != nil {
			return fmt.Errorf("starting private PostgreSQL for tests (or set TEST_DATABASE_URL): %w", err)
		}
		raw = server.URL("postgres")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("parsing TEST_DATABASE_URL: %w", err)
	}
	baseURL = u
	admin, err = sql.Open("pgx", raw)
	if err != nil {
		return err
	}
	admin.SetMaxOpenConns(4)
	if err := admin.QueryRowContext(ctx, "SELECT current_setting('server_version_num')::int").Scan(&versionNum); err != nil {
		return fmt.Errorf("reading the server's version: %w", dbconn.RedactError(raw, err))
	}
	if v := os.Getenv(pglocal.EnvVersion); v != "" && strconv.Itoa(versionNum/10000) != v {
		return fmt.Errorf("%s=%s but the test server is PostgreSQL %d", pglocal.EnvVersion, v, versionNum/10000)
	}
	template = "baton_tpl_" + randomSuffix()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+quoteIdent(template)); err != nil {
		return fmt.Errorf("creating template database: %w", dbconn.RedactError(raw, err))
	}
	db, err := dbconn.Open(withDatabase(template), dbconn.Options{MaxOpenConns: 2})
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := schema.Migrate(ctx, db, schema.Config{Sets: append([]*schema.Set{schema.Core}, extraSets...)}); err != nil {
		return fmt.Errorf("migrating template database: %w", err)
	}
	return nil
}

func withDatabase(name string) string {
	u := *baseURL
	u.Path = "/" + name
	return u.String()
}

func randomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func quoteIdent(s string) string { return `"` + s + `"` }

// VersionNum returns the test server's server_version_num (180004 for
// 18.4), for a test of a statement that differs between versions.
func VersionNum(t testing.TB) int {
	t.Helper()
	ensure(t)
	return versionNum
}

// Server returns the private server, or nil (after skipping t) when tests
// run against an external TEST_DATABASE_URL, which cannot be restarted.
func Server(t testing.TB) *pglocal.Server {
	t.Helper()
	ensure(t)
	if server == nil {
		t.Skip("needs the private test server (TEST_DATABASE_URL is set)")
	}
	return server
}

func ensure(t testing.TB) {
	t.Helper()
	once.Do(func() { setupErr = setup() })
	if setupErr != nil {
		t.Fatalf("test database: %v", setupErr)
	}
}

// NewURL creates a fresh database with the current schema, dropped when the
// test ends, and returns its URL.
func NewURL(t testing.TB) string {
	t.Helper()
	return newDatabase(t, true)
}

// NewEmptyURL creates a fresh database without any schema.
func NewEmptyURL(t testing.TB) string {
	t.Helper()
	return newDatabase(t, false)
}

func newDatabase(t testing.TB, migrated bool) string {
	ensure(t)
	name := "baton_test_" + randomSuffix()
	stmt := "CREATE DATABASE " + quoteIdent(name)
	if migrated {
		stmt += " TEMPLATE " + quoteIdent(template)
	}
	// Cloning a template fails if another clone is reading it at that
	// moment, so clones are serialised within this process.
	createMu.Lock()
	_, err := admin.Exec(stmt)
	createMu.Unlock()
	if err != nil {
		t.Fatalf("creating test database: %v", err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec("DROP DATABASE IF EXISTS " + quoteIdent(name) + " WITH (FORCE)"); err != nil {
			t.Errorf("dropping test database %s: %v", name, err)
		}
	})
	return withDatabase(name)
}

// NewDB returns a handle on a fresh migrated database, closed when the test
// ends.
func NewDB(t testing.TB) *bun.DB {
	t.Helper()
	return Open(t, NewURL(t), dbconn.Options{})
}

// Open opens dsn with opts and closes it when the test ends, as a bun
// handle (see OpenDB).
func Open(t testing.TB, dsn string, opts dbconn.Options) *bun.DB {
	t.Helper()
	return OpenDB(t, dsn, opts).DB
}

// OpenDB opens dsn with opts and closes it when the test ends, as the
// handle the distributor, schedule, leader and schema take.
func OpenDB(t testing.TB, dsn string, opts dbconn.Options) *dbconn.DB {
	t.Helper()
	db, err := dbconn.Open(dsn, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// WaitForLockWait blocks until a statement whose text contains marker is
// waiting for a lock in the test's database: the signal that a concurrent
// transaction has queued behind another, without guessing with a sleep.
func WaitForLockWait(t testing.TB, db *bun.DB, marker string) {
	t.Helper()
	waitForSession(t, db, fmt.Sprintf("a statement containing %q waiting for a lock", marker), `
		wait_event_type = 'Lock' AND strpos(query, ?) > 0`, marker)
}

// WaitForLockWaitOn blocks until a statement whose text contains marker is
// waiting for a lock held by the session blocker (a backend pid): unlike
// WaitForLockWait, a wait on some other session's lock (a worker's
// heartbeat briefly holding a row, say) does not count.
func WaitForLockWaitOn(t testing.TB, db *bun.DB, marker string, blocker int) {
	t.Helper()
	waitForSessions(t, db, fmt.Sprintf("a statement containing %q waiting for a lock held by pid %d", marker, blocker), `
		wait_event_type = 'Lock' AND strpos(query, ?) > 0 AND ? = ANY (pg_blocking_pids(pid))`, true, marker, blocker)
}

// WaitForNoLockWait blocks until no statement whose text contains marker
// is waiting for a lock in the test's database: the signal that a wait
// abandoned by its client (a cancelled context) has ended on the server
// too. The driver returns from a cancelled statement at once and the server
// ends the wait only when the cancel request reaches it; until then the
// waiting session can still be granted the lock.
func WaitForNoLockWait(t testing.TB, db *bun.DB, marker string) {
	t.Helper()
	waitForSessions(t, db, fmt.Sprintf("no statement containing %q waiting for a lock", marker), `
		wait_event_type = 'Lock' AND strpos(query, ?) > 0`, false, marker)
}

// WaitForStatement waits until some session of this database has run a
// statement starting with prefix (pg_stat_activity keeps the last one).
func WaitForStatement(t testing.TB, db *bun.DB, prefix string) {
	t.Helper()
	waitForSession(t, db, fmt.Sprintf("a session that ran a statement starting with %q", prefix), `
		starts_with(query, ?)`, prefix)
}

// waitForSession polls pg_stat_activity until a session of this database
// matches cond, or fails the test.
func waitForSession(t testing.TB, db *bun.DB, what, cond string, args ...any) {
	t.Helper()
	waitForSessions(t, db, what, cond, true, args...)
}

// waitForSessions polls pg_stat_activity until whether a session of this
// database matches cond is want, or fails the test.
func waitForSessions(t testing.TB, db *bun.DB, what, cond string, want bool, args ...any) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		if err := db.QueryRowContext(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND `+cond, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if (n > 0) == want {
			return
		}
		time.Sleep(10 * time.Millisecond) // pg_stat_activity offers no notification
	}
	t.Fatalf("timed out waiting for %s", what)
}

// ExampleDB is ExampleURL opened as a plain bun handle (database/sql over
// pgx, as an embedding service opens it) and described to baton as direct
// with dbconn.Wrap: the database and a function that closes the handle and
// drops the database.
func ExampleDB() (db *dbconn.DB, done func()) {
	url, drop := ExampleURL()
	sqldb, err := sql.Open("pgx", url)
	if err != nil {
		drop()
		panic(fmt.Sprintf("opening example database: %v", err))
	}
	bdb := bun.NewDB(sqldb, pgdialect.New())
	db, err = dbconn.Wrap(context.Background(), bdb, dbconn.Access{})
	if err != nil {
		bdb.Close()
		drop()
		panic(fmt.Sprintf("describing example database: %v", err))
	}
	return db, func() { db.Close(); drop() }
}

// ExampleURL is NewURL for runnable examples, which have no testing.T: it
// creates a fresh migrated database on the package's test server and
// returns its URL and a function that drops it. It panics if it cannot.
func ExampleURL() (url string, drop func()) {
	once.Do(func() { setupErr = setup() })
	if setupErr != nil {
		panic(fmt.Sprintf("test database: %v", setupErr))
	}
	name := "baton_example_" + randomSuffix()
	createMu.Lock()
	_, err := admin.Exec("CREATE DATABASE " + quoteIdent(name) + " TEMPLATE " + quoteIdent(template))
	createMu.Unlock()
	if err != nil {
		panic(fmt.Sprintf("creating example database: %v", err))
	}
	return withDatabase(name), func() {
		_, _ = admin.Exec("DROP DATABASE IF EXISTS " + quoteIdent(name) + " WITH (FORCE)")
	}
}

// Handle describes db, a test's plain handle (NewDB, Open), to baton as
// pooled, which dbconn.Wrap never checks, so that it can be given where a
// *dbconn.DB is taken (a partition.Store, a console). It shares db's
// connections; closing either closes both.
func Handle(db *bun.DB) *dbconn.DB {
	h, err := dbconn.Wrap(context.Background(), db, dbconn.Access{Pooled: true})
	if err != nil {
		panic(fmt.Sprintf("describing a test handle: %v", err))
	}
	return h
}
