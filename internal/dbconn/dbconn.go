// Package dbconn opens baton's database handles: bun over pgx's database/sql
// driver, with the server-side limits a worker needs so that a hung or
// cut-off process cannot hold row locks indefinitely, and with DSN redaction
// so that passwords never reach logs or errors.
package dbconn

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
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
	// trip and a plan per statement for nothing. Exec mode sends it in one.
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	params := cfg.RuntimeParams
	params["application_name"] = opts.ApplicationName
	setMillis(params, "statement_timeout", opts.StatementTimeout)
	setMillis(params, "lock_timeout", opts.LockTimeout)
	setMillis(params, "idle_in_transaction_session_timeout", opts.IdleInTransactionTimeout)
	secs := max(1, int(opts.KeepAlive/time.Second))
	params["tcp_keepalives_idle"] = strconv.Itoa(secs)
	params["tcp_keepalives_interval"] = strconv.Itoa(secs)
	params["tcp_keepalives_count"] = "3"
	dialer := &net.Dialer{Timeout: opts.ConnectTimeout, KeepAliveConfig: net.KeepAliveConfig{
		Enable: true, Idle: opts.KeepAlive, Interval: opts.KeepAlive, Count: 3,
	}}
	cfg.DialFunc = dialer.DialContext

	sqldb := stdlib.OpenDB(*cfg)
	sqldb.SetMaxOpenConns(opts.MaxOpenConns)
	sqldb.SetMaxIdleConns(opts.MaxOpenConns)
	sqldb.SetConnMaxIdleTime(5 * time.Minute)
	return bun.NewDB(sqldb, pgdialect.New()), nil
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

// Redact returns dsn with any password replaced by "xxxxx". It handles URL
// and key=value forms.
func Redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		if u.User != nil {
			if _, has := u.User.Password(); has {
				u.User = url.UserPassword(u.User.Username(), "xxxxx")
			}
		}
		q := u.Query()
		if q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	// Not a URL that parses: hide the password by pattern.
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
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("unexpected driver connection %T", dc)
		}
		return fn(c.Conn())
	})
}
