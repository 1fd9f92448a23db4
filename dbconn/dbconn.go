// Package dbconn describes and opens baton's database access: a DB is a bun
// handle over pgx's database/sql driver together with what baton must know
// about how it reaches PostgreSQL, which distributor, schedule, leader and
// schema take instead of a bare *bun.DB.
//
// There are two ways to get one. Open opens the handle itself, with the
// server-side limits a worker needs so that a hung or cut-off process
// cannot hold row locks indefinitely, TCP keepalives and a user timeout,
// and finds out by itself whether it reaches PostgreSQL directly or
// through a transaction pooler (PgBouncer with pool_mode = transaction).
// Wrap describes a handle the application opened itself (sql.Open("pgx",
// url)): whether it goes through a pooler, the URL of a direct connection
// to LISTEN on, and the timeouts baton's transactions must carry, which
// such a handle gets by SET LOCAL at the start of each transaction. A
// handle described as direct that in fact reaches a pooler is refused by
// Wrap, so that nothing silently LISTENs, prepares statements or takes
// session advisory locks through a pooler.
//
// A process that may start before its database (a container beside the
// database's own) opens it through Wait, which retries what its caller
// says a wait may cure, with back-off, for up to a timeout, and fails at
// once on the rest: a malformed URL, a refused password, a schema that
// does not exist (schema.MissingError).
//
// Through a pooler the handles use no named prepared statements, no
// startup parameters a pooler rejects once it has rejected them, and no
// session state across transactions; DSNs are redacted so that passwords
// never reach logs or errors.
package dbconn

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/batonhq/baton/internal/redact"
)

// Options tune a connection pool. Zero durations leave the server default.
type Options struct {
	// ApplicationName is shown in pg_stat_activity. Defaults to "baton".
	ApplicationName string
	// StatementTimeout aborts any statement running longer than this.
	StatementTimeout time.Duration
	// LockTimeout aborts a statement waiting longer than this for a lock.
	LockTimeout time.Duration
	// IdleInTransactionTimeout makes the server end a session that sits idle
	// inside a transaction for longer than this, releasing its row locks.
	IdleInTransactionTimeout time.Duration
	// KeepAlive is the TCP keepalive period for client sockets, and the
	// server-side tcp_keepalives_idle/interval. Defaults to 5s.
	KeepAlive time.Duration
	// ConnectTimeout bounds establishing a connection. Defaults to 5s.
	ConnectTimeout time.Duration
	// MaxOpenConns caps the pool. Defaults to 10.
	MaxOpenConns int
	// ListenURL, if set, is a direct (session) connection to the same
	// database for LISTEN, for a handle that goes through a transaction
	// pooler (see DB.ListenURL). Empty by default.
	ListenURL string
}

// Access describes a handle the application opened itself (see Wrap).
type Access struct {
	// Pooled says the handle reaches PostgreSQL through a transaction
	// pooler (PgBouncer with pool_mode = transaction, or any proxy that
	// hands each transaction whichever server session is free). baton then
	// never LISTENs, prepares statements or takes session advisory locks
	// through it, and schema.Migrate refuses it. False describes a handle
	// whose every connection is a session of PostgreSQL itself; Wrap checks
	// that it is.
	Pooled bool
	// ListenURL, if set, is a direct (session) connection to the same
	// database, for a distributor to LISTEN on when the handle is pooled.
	// Without it a distributor over a pooled handle polls for work.
	ListenURL string
	// StatementTimeout, LockTimeout and IdleInTransactionTimeout, when
	// positive, are set with SET LOCAL at the start of every transaction
	// baton begins on the handle (through DB.BeginTx, DB.RunInTx, or
	// DB.SetLocalTimeouts after a BeginTx on one of its connections).
	// Zero leaves the session's setting.
	StatementTimeout         time.Duration
	LockTimeout              time.Duration
	IdleInTransactionTimeout time.Duration
}

// DB is a bun handle with what baton knows of how it reaches PostgreSQL:
// from Open, as its connections found out; from Wrap, as described. Use it
// wherever a *bun.DB is used (it embeds one); begin baton's transactions on
// it, not on the embedded *bun.DB, so that they carry its timeouts.
type DB struct {
	*bun.DB
	c         *connector // Open's; nil for a wrapped handle
	pooled    bool       // wrapped: described as pooled
	local     string     // wrapped: the statement setting the timeouts, "" for none
	listenURL string
}

// ErrNotDirect is returned by Wrap for a handle described as direct
// (Access.Pooled false) whose connection is not a session of PostgreSQL
// itself but of a pooler or proxy.
var ErrNotDirect = errors.New("the database handle is described as direct but reaches PostgreSQL through a connection pooler or proxy")

// Wrap describes db, a handle the application opened with pgx's
// database/sql driver (sql.Open("pgx", url) or stdlib.OpenDB), for baton.
//
// A handle described as direct is checked on one of its connections, which
// Wrap makes (so the server must answer): PostgreSQL tells each client the
// process id of its own session (the cancel key), which a pooler replaces
// with a key of its own; when the two differ, Wrap returns an error
// wrapping ErrNotDirect that says how to describe the handle instead. A
// handle described as pooled is not checked: treating a direct handle as
// pooled costs wake-up latency and prepared statements, never safety.
//
// Unlike Open's handles, whose connections carry the timeouts from their
// start, a wrapped handle's transactions get them by SET LOCAL in their
// first round trip after BEGIN, whether it is pooled or not.
func Wrap(ctx context.Context, db *bun.DB, a Access) (*DB, error) {
	if db == nil {
		return nil, errors.New("dbconn.Wrap: db is nil")
	}
	for _, t := range []struct {
		name string
		d    time.Duration
	}{{"StatementTimeout", a.StatementTimeout}, {"LockTimeout", a.LockTimeout}, {"IdleInTransactionTimeout", a.IdleInTransactionTimeout}} {
		if t.d < 0 {
			return nil, fmt.Errorf("dbconn.Wrap: %s is negative (%s)", t.name, t.d)
		}
	}
	if a.ListenURL != "" {
		if _, err := pgx.ParseConfig(a.ListenURL); err != nil {
			return nil, fmt.Errorf("dbconn.Wrap: parsing ListenURL %s: %w", Redact(a.ListenURL), RedactError(a.ListenURL, err))
		}
	}
	if !a.Pooled {
		if err := checkDirect(ctx, db); err != nil {
			return nil, err
		}
	}
	return &DB{DB: db, pooled: a.Pooled, listenURL: a.ListenURL,
		local: localTimeouts(a.StatementTimeout, a.LockTimeout, a.IdleInTransactionTimeout)}, nil
}

// checkDirect makes sure that a connection of db is a session of
// PostgreSQL itself: the process id in the cancel key the server sent when
// it was opened is that of the session running its statements.
func checkDirect(ctx context.Context, db *bun.DB) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("dbconn.Wrap: connecting to check that the handle is direct: %w", err)
	}
	defer conn.Close()
	var keyPID, backendPID uint32
	err = conn.Raw(func(dc any) error {
		switch c := dc.(type) {
		case *pooledConn:
			keyPID, backendPID = 0, 1 // Open found a pooler: not direct
			return nil
		case *stdlib.Conn:
			keyPID = c.Conn().PgConn().PID()
			return c.Conn().QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backendPID)
		}
		return fmt.Errorf("the handle's driver connection is %T: open it with pgx's database/sql driver (sql.Open(\"pgx\", url) or stdlib.OpenDB, package github.com/jackc/pgx/v5/stdlib)", dc)
	})
	if err != nil {
		return fmt.Errorf("dbconn.Wrap: checking that the handle is direct: %w", err)
	}
	if keyPID != backendPID {
		return fmt.Errorf("dbconn.Wrap: %w (its session runs in server process %d, its cancel key names %d): "+
			"describe it with Access{Pooled: true, ListenURL: <a direct URL>} (no LISTEN, prepared statements or migrations through it), "+
			"or open it with a URL that reaches PostgreSQL itself", ErrNotDirect, backendPID, keyPID)
	}
	return nil
}

// Pooled reports whether the handle reaches PostgreSQL through a
// transaction pooler: as described to Wrap, or, for a handle from Open,
// once its first connection's settings were rejected (false until a
// connection has been made: Ping first).
func (db *DB) Pooled() bool {
	if db.c == nil {
		return db.pooled
	}
	return db.c.isPooled.Load()
}

// Direct reports whether the handle reaches PostgreSQL itself, so that its
// connections may keep prepared statements, which through a transaction
// pooler they may not. A wrapped handle is direct unless described as
// pooled (Wrap checked it); one from Open once a connection with its
// session settings has been made and no server has rejected them.
func (db *DB) Direct() bool {
	if db.c == nil {
		return !db.pooled
	}
	return db.c.isDirect.Load() && !db.c.isPooled.Load()
}

// ListenURL is the direct connection to LISTEN on given to Wrap or Open,
// or "".
func (db *DB) ListenURL() string { return db.listenURL }

// LocalTimeouts returns the statement that sets the handle's timeouts for
// the current transaction only (SET LOCAL, via set_config), or "" when
// there is nothing to set: a direct connection from Open carries them for
// the whole session. Run it first in every transaction begun on a raw pgx
// connection (see Raw); transactions begun through DB.BeginTx, DB.RunInTx
// or followed by DB.SetLocalTimeouts have them already.
func (db *DB) LocalTimeouts() string {
	if db.c == nil {
		return db.local
	}
	if !db.c.isPooled.Load() {
		return ""
	}
	return db.c.localTimeouts()
}

// BeginTx begins a transaction with the handle's timeouts in force. On a
// handle from Open it is the embedded bun handle's BeginTx (the
// connection has the timeouts or sets them with its BEGIN, see Open); on
// a wrapped handle it sets them with SET LOCAL right after BEGIN.
func (db *DB) BeginTx(ctx context.Context, opts *sql.TxOptions) (bun.Tx, error) {
	tx, err := db.DB.BeginTx(ctx, opts)
	if err != nil {
		return tx, err
	}
	if err := db.SetLocalTimeouts(ctx, tx); err != nil {
		_ = tx.Rollback()
		return bun.Tx{}, err
	}
	return tx, nil
}

// Begin is BeginTx with a background context and default options.
func (db *DB) Begin() (bun.Tx, error) { return db.BeginTx(context.Background(), nil) }

// RunInTx runs fn in a transaction begun by BeginTx, committing if fn
// returns nil and rolling back otherwise (also when fn panics).
func (db *DB) RunInTx(ctx context.Context, opts *sql.TxOptions, fn func(ctx context.Context, tx bun.Tx) error) error {
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			_ = tx.Rollback()
		}
	}()
	if err := fn(ctx, tx); err != nil {
		return err
	}
	done = true
	return tx.Commit()
}

// SetLocalTimeouts gives tx, a transaction just begun on one of the
// handle's connections (db.Conn(ctx), then BeginTx on it), the handle's
// timeouts. A transaction on a handle from Open has them from its BEGIN,
// so nothing is sent; on a wrapped handle with timeouts it costs one round
// trip.
func (db *DB) SetLocalTimeouts(ctx context.Context, tx bun.Tx) error {
	if db.c != nil || db.local == "" {
		return nil
	}
	if _, err := tx.ExecContext(ctx, db.local); err != nil {
		return fmt.Errorf("setting the handle's timeouts for the transaction: %w", err)
	}
	return nil
}

// Open returns a handle for dsn. It does not contact the server.
//
// Connections to PostgreSQL itself carry the timeouts and TCP keepalive
// settings as startup parameters, so they hold for every statement. A
// transaction pooler such as PgBouncer rejects those parameters ("unsupported
// startup parameter"); when it does, the handle switches to pooled mode for
// good: it connects without them (keepalives stay on the client socket), and
// every transaction begun through database/sql or bun on the handle (BeginTx,
// RunInTx, on the handle or on one of its connections) sets the timeouts for
// itself, in the same round trip as its BEGIN. Transactions begun on a raw
// pgx connection (see Raw) must run DB.LocalTimeouts first themselves.
// DB.Pooled reports the mode once a connection has been made.
func Open(dsn string, opts Options) (*DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parsing database URL %s: %w", Redact(dsn), RedactError(dsn, err))
	}
	if opts.ListenURL != "" {
		if _, err := pgx.ParseConfig(opts.ListenURL); err != nil {
			return nil, fmt.Errorf("parsing listen URL %s: %w", Redact(opts.ListenURL), RedactError(opts.ListenURL, err))
		}
	}
	if opts.ApplicationName == "" {
		opts.ApplicationName = "baton"
	}
	if opts.KeepAlive == 0 {
		opts.KeepAlive = 5 * time.Second
	}
	if opts.ConnectTimeout == 0 {
		opts.ConnectTimeout = 5 * time.Second
	}
	if opts.MaxOpenConns == 0 {
		opts.MaxOpenConns = 10
	}
	cfg.ConnectTimeout = opts.ConnectTimeout
	// bun formats values into the statement text, so nearly every text is
	// new: preparing and caching each one (pgx's default) costs a round
	// trip and a plan per statement for nothing. Exec mode sends it in one,
	// as an unnamed statement, which transaction poolers also accept.
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	cfg.RuntimeParams["application_name"] = opts.ApplicationName
	c := &connector{opts: opts}
	// Count the commits the server reports as not confirmed by its
	// synchronous standby (see ErrNotReplicated), per connection and for
	// the handle.
	cfg.OnNotice = WatchNotices(cfg.OnNotice, func(*pgconn.Notice) { c.notReplicated.Add(1) })
	dialer := &net.Dialer{Timeout: opts.ConnectTimeout, KeepAliveConfig: net.KeepAliveConfig{
		Enable: true, Idle: opts.KeepAlive, Interval: opts.KeepAlive, Count: 3,
	}, Control: userTimeout(4 * opts.KeepAlive)}
	cfg.DialFunc = dialer.DialContext

	pooledCfg := cfg.Copy()
	// Through a pooler, no cancel requests: pgx sends one when it abandons
	// a statement (a context ended mid-query), and PgBouncer 1.18 (Debian
	// 12's) exits on a cancel connection its client closes early, as a
	// process that is exiting does. The abandoned connection is closed
	// instead, which makes the pooler close its server connection. pgx
	// dials cancel requests with DialFunc too, but never with the context
	// of a connect, which connector.Connect marks.
	pooledCfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if ctx.Value(connecting{}) == nil {
			return nil, errNoCancel
		}
		return dialer.DialContext(ctx, network, addr)
	}
	params := cfg.RuntimeParams
	setMillis(params, "statement_timeout", opts.StatementTimeout)
	setMillis(params, "lock_timeout", opts.LockTimeout)
	setMillis(params, "idle_in_transaction_session_timeout", opts.IdleInTransactionTimeout)
	secs := max(1, int(opts.KeepAlive/time.Second))
	params["tcp_keepalives_idle"] = strconv.Itoa(secs)
	params["tcp_keepalives_interval"] = strconv.Itoa(secs)
	params["tcp_keepalives_count"] = "3"

	c.direct, c.pooled = stdlib.GetConnector(*cfg), stdlib.GetConnector(*pooledCfg)
	sqldb := sql.OpenDB(c)
	sqldb.SetMaxOpenConns(opts.MaxOpenConns)
	sqldb.SetMaxIdleConns(opts.MaxOpenConns)
	sqldb.SetConnMaxIdleTime(5 * time.Minute)
	return &DB{DB: bun.NewDB(sqldb, pgdialect.New()), c: c, listenURL: opts.ListenURL}, nil
}

// connector connects directly, with the session settings as startup
// parameters, until a server rejects them; then it connects without them.
type connector struct {
	direct, pooled driver.Connector
	opts           Options
	isPooled       atomic.Bool
	isDirect       atomic.Bool // a connection with the session settings was made
	notReplicated  atomic.Int64
}

func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	if !c.isPooled.Load() {
		conn, err := c.direct.Connect(ctx)
		if err == nil {
			c.isDirect.Store(true)
		}
		if err == nil || !rejectsStartupParameters(err) {
			return conn, err
		}
		c.isPooled.Store(true)
	}
	conn, err := c.pooled.Connect(context.WithValue(ctx, connecting{}, true))
	if err != nil {
		return nil, err
	}
	sc, ok := conn.(*stdlib.Conn)
	if !ok {
		_ = conn.Close()
		return nil, fmt.Errorf("unexpected driver connection %T", conn)
	}
	return &pooledConn{Conn: sc, c: c}, nil
}

// pooledConn is a connection through a transaction pooler. The session
// settings of the connection string do not reach the server session a
// transaction runs on there, so every transaction begun on it sets the
// timeouts for itself: a worker stopped between a statement and its
// COMMIT (SIGSTOP, a frozen VM) is then ended by the server's
// idle_in_transaction_session_timeout, releasing its row locks, wherever
// in baton the transaction was begun. Everything else is the pgx
// connection's.
type pooledConn struct {
	*stdlib.Conn
	c *connector
}

// BeginTx begins a transaction with the handle's timeouts set for it, in
// one round trip: "BEGIN ...; SELECT set_config(..., true), ...".
func (pc *pooledConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	set := pc.c.localTimeouts()
	if set == "" {
		return pc.Conn.BeginTx(ctx, opts)
	}
	begin, err := beginSQL(opts)
	if err != nil {
		return nil, err
	}
	conn := pc.Conn.Conn()
	if conn.IsClosed() {
		return nil, driver.ErrBadConn
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{BeginQuery: begin + "; " + set})
	if err != nil {
		// BEGIN may have run and the settings failed: leave no
		// transaction open on the connection.
		if !conn.IsClosed() && conn.PgConn().TxStatus() != 'I' {
			_, _ = conn.Exec(ctx, "ROLLBACK")
		}
		return nil, fmt.Errorf("beginning a transaction with the handle's timeouts: %w", err)
	}
	return pgxTx{ctx: ctx, tx: tx}, nil
}

// Begin is BeginTx with no context and default options.
func (pc *pooledConn) Begin() (driver.Tx, error) {
	return pc.BeginTx(context.Background(), driver.TxOptions{})
}

// beginSQL is the BEGIN statement for opts, as pgx's database/sql driver
// writes it.
func beginSQL(opts driver.TxOptions) (string, error) {
	q := "BEGIN"
	switch sql.IsolationLevel(opts.Isolation) {
	case sql.LevelDefault:
	case sql.LevelReadUncommitted:
		q += " ISOLATION LEVEL READ UNCOMMITTED"
	case sql.LevelReadCommitted:
		q += " ISOLATION LEVEL READ COMMITTED"
	case sql.LevelRepeatableRead, sql.LevelSnapshot:
		q += " ISOLATION LEVEL REPEATABLE READ"
	case sql.LevelSerializable:
		q += " ISOLATION LEVEL SERIALIZABLE"
	default:
		return "", fmt.Errorf("unsupported isolation: %v", sql.IsolationLevel(opts.Isolation))
	}
	if opts.ReadOnly {
		q += " READ ONLY"
	}
	return q, nil
}

// pgxTx is a pgx transaction as a database/sql driver transaction. As in
// pgx's driver, COMMIT and ROLLBACK run with the context the transaction
// was begun with (database/sql ends the transaction itself when that
// context ends).
type pgxTx struct {
	ctx context.Context
	tx  pgx.Tx
}

func (t pgxTx) Commit() error   { return t.tx.Commit(t.ctx) }
func (t pgxTx) Rollback() error { return t.tx.Rollback(t.ctx) }

// connecting marks the context of a connect, as opposed to a cancel
// request, for the pooled dialer.
type connecting struct{}

var errNoCancel = errors.New("no cancel requests through a transaction pooler")

func (c *connector) Driver() driver.Driver { return c.direct.Driver() }

// rejectsStartupParameters reports the error a transaction pooler gives a
// client that sends server settings it does not know (PgBouncer:
// "unsupported startup parameter", SQLSTATE 08P01).
func rejectsStartupParameters(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && strings.Contains(pgErr.Message, "unsupported startup parameter")
}

// localTimeouts is the statement setting c's timeouts for one transaction,
// or "" when none is set.
func (c *connector) localTimeouts() string {
	return localTimeouts(c.opts.StatementTimeout, c.opts.LockTimeout, c.opts.IdleInTransactionTimeout)
}

// localTimeouts is the statement setting these timeouts for one
// transaction, or "" when none is positive.
func localTimeouts(statement, lock, idle time.Duration) string {
	var sets []string
	for _, s := range []struct {
		name string
		d    time.Duration
	}{
		{"statement_timeout", statement},
		{"lock_timeout", lock},
		{"idle_in_transaction_session_timeout", idle},
	} {
		if s.d > 0 {
			sets = append(sets, fmt.Sprintf("set_config('%s', '%d', true)", s.name, s.d.Milliseconds()))
		}
	}
	if len(sets) == 0 {
		return ""
	}
	return "SELECT " + strings.Join(sets, ", ")
}

func setMillis(params map[string]string, name string, d time.Duration) {
	if d > 0 {
		params[name] = strconv.FormatInt(d.Milliseconds(), 10)
	}
}

// Ping checks that the server answers, with the DSN's password redacted from
// any error.
func Ping(ctx context.Context, db *DB, dsn string) error {
	if err := db.PingContext(ctx); err != nil {
		return fmt.Errorf("connecting to %s: %w", Redact(dsn), &onceError{RedactError(dsn, err)})
	}
	return nil
}

// onceError says each line of err's message once: pgx tries a host twice
// with sslmode=prefer (TLS, then plain) and lists the same dial error for
// each attempt.
type onceError struct{ err error }

func (e *onceError) Error() string {
	lines := strings.Split(e.err.Error(), "\n")
	seen := make(map[string]bool, len(lines))
	out := lines[:0]
	for _, l := range lines {
		if seen[l] {
			continue
		}
		seen[l] = true
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

func (e *onceError) Unwrap() error { return e.err }

// Redact returns dsn with any password replaced by "xxxxx": in URL form
// everything between "://user:" and the URL's last '@', and any password=
// value (key=value form, or a URL's query), whether or not dsn parses.
func Redact(dsn string) string {
	return redact.New(dsn).String(dsn)
}

// RedactError wraps err so that its message never contains the password of
// dsn (nor any URL or key=value password); errors.Is/As still see the
// original.
func RedactError(dsn string, err error) error {
	if err == nil {
		return nil
	}
	return &redactedError{err: err, r: redact.New(dsn)}
}

type redactedError struct {
	err error
	r   *redact.Redactor
}

func (e *redactedError) Error() string { return e.r.String(e.err.Error()) }
func (e *redactedError) Unwrap() error { return e.err }

// PgxConn is the pgx connection behind pc, for baton's internal use
// (internal/pgxconn).
func (pc *pooledConn) PgxConn() *pgx.Conn { return pc.Conn.Conn() }
