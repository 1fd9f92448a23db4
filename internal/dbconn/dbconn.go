// Package dbconn opens baton's database handles: bun over pgx's database/sql
// driver, with the server-side limits a worker needs so that a hung or
// cut-off process cannot hold row locks indefinitely, and with DSN redaction
// so that passwords never reach logs or errors. The handles work directly
// against PostgreSQL and through a transaction pooler (PgBouncer with
// pool_mode = transaction): no named prepared statements, no startup
// parameters a pooler rejects once it has rejected them, timeouts set per
// transaction there, and no session state relied on across transactions.
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
	"sync"
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
}

// Open returns a bun handle for dsn. It does not contact the server.
//
// Connections to PostgreSQL itself carry the timeouts and TCP keepalive
// settings as startup parameters, so they hold for every statement. A
// transaction pooler such as PgBouncer rejects those parameters ("unsupported
// startup parameter"); when it does, the handle switches to pooled mode for
// good: it connects without them (keepalives stay on the client socket), and
// every transaction begun through database/sql or bun on the handle (BeginTx,
// RunInTx, on the handle or on one of its connections) sets the timeouts for
// itself, in the same round trip as its BEGIN. Transactions begun on a raw
// pgx connection (see Raw) must run LocalTimeouts first themselves. Pooled
// reports the mode once a connection has been made.
func Open(dsn string, opts Options) (*bun.DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parsing database URL %s: %w", Redact(dsn), RedactError(dsn, err))
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

	c := &connector{direct: stdlib.GetConnector(*cfg), pooled: stdlib.GetConnector(*pooledCfg), opts: opts}
	sqldb := sql.OpenDB(c)
	sqldb.SetMaxOpenConns(opts.MaxOpenConns)
	sqldb.SetMaxIdleConns(opts.MaxOpenConns)
	sqldb.SetConnMaxIdleTime(5 * time.Minute)
	handles.Store(sqldb, c)
	return bun.NewDB(sqldb, pgdialect.New()), nil
}

// handles maps each *sql.DB that Open made to its connector, so that Pooled
// and BeginTx can tell its mode.
var handles sync.Map // *sql.DB → *connector

// connector connects directly, with the session settings as startup
// parameters, until a server rejects them; then it connects without them.
type connector struct {
	direct, pooled driver.Connector
	opts           Options
	isPooled       atomic.Bool
	isDirect       atomic.Bool // a connection with the session settings was made
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

// Pooled reports whether db, opened by Open, reaches PostgreSQL through a
// transaction pooler: its first connection's settings were rejected. It is
// false until a connection has been made (Ping first).
func Pooled(db *bun.DB) bool {
	c, ok := handles.Load(db.DB)
	return ok && c.(*connector).isPooled.Load()
}

// Direct reports whether db, opened by Open, reaches PostgreSQL itself: a
// connection with its session settings has been made and no server has
// rejected them. Its connections may then keep prepared statements, which
// through a transaction pooler they may not. It is false until a connection
// has been made, and for handles Open did not make.
func Direct(db *bun.DB) bool {
	c, ok := handles.Load(db.DB)
	return ok && c.(*connector).isDirect.Load() && !c.(*connector).isPooled.Load()
}

// LocalTimeouts returns the statement that sets db's timeouts for the
// current transaction only (SET LOCAL, via set_config), or "" when there is
// nothing to set: a direct connection carries them for the whole session.
// Run it first in every transaction begun on a raw pgx connection (see
// Raw); transactions begun through database/sql or bun have them already.
func LocalTimeouts(db *bun.DB) string {
	v, ok := handles.Load(db.DB)
	if !ok {
		return ""
	}
	c := v.(*connector)
	if !c.isPooled.Load() {
		return ""
	}
	return c.localTimeouts()
}

// localTimeouts is the statement setting c's timeouts for one transaction,
// or "" when none is set.
func (c *connector) localTimeouts() string {
	var sets []string
	for _, s := range []struct {
		name string
		d    time.Duration
	}{
		{"statement_timeout", c.opts.StatementTimeout},
		{"lock_timeout", c.opts.LockTimeout},
		{"idle_in_transaction_session_timeout", c.opts.IdleInTransactionTimeout},
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

// BeginTx begins a transaction on db with db's timeouts in force. It is
// db.BeginTx: through a transaction pooler every transaction begun through
// database/sql on a handle from Open sets them for itself (see Open); on a
// direct connection the session already has them.
func BeginTx(ctx context.Context, db *bun.DB, opts *sql.TxOptions) (bun.Tx, error) {
	return db.BeginTx(ctx, opts)
}

// SetLocalTimeouts ensures db's timeouts for tx, a transaction just begun
// on one of db's connections. Such a transaction has them from its BEGIN
// (see Open), so there is nothing left to do; it is kept for callers
// written before that, and costs no round trip.
func SetLocalTimeouts(ctx context.Context, db *bun.DB, tx bun.Tx) error {
	return nil
}

func setMillis(params map[string]string, name string, d time.Duration) {
	if d > 0 {
		params[name] = strconv.FormatInt(d.Milliseconds(), 10)
	}
}

// Ping checks that the server answers, with the DSN's password redacted from
// any error.
func Ping(ctx context.Context, db *bun.DB, dsn string) error {
	if err := db.PingContext(ctx); err != nil {
		return fmt.Errorf("connecting to %s: %w", Redact(dsn), RedactError(dsn, err))
	}
	return nil
}

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

// Raw returns the pgx connection behind a database/sql connection, for COPY
// and LISTEN, which database/sql cannot express.
func Raw(conn *sql.Conn, fn func(*pgx.Conn) error) error {
	return conn.Raw(func(dc any) error {
		switch c := dc.(type) {
		case *stdlib.Conn:
			return fn(c.Conn())
		case *pooledConn:
			return fn(c.Conn.Conn())
		}
		return fmt.Errorf("unexpected driver connection %T", dc)
	})
}
