// Package lock takes transaction-scoped exclusive locks on arbitrary keys
// ("BondBO:DK0015966592"), whether or not any row for the key exists.
//
// A lock is taken inside the caller's transaction and released when that
// transaction commits or rolls back, including when its session ends
// because the process died: the server aborts the transaction as soon as
// the connection closes. Waiting is bounded by the context and by a lock
// timeout (PostgreSQL's lock_timeout, set for the transaction). A failed
// Acquire leaves the transaction aborted: roll it back.
//
// Cancelling the context ends Acquire at once, but the wait on the server
// only a moment later: the driver abandons the connection and sends a
// cancel request, which the waiting session acts on when it arrives (behind
// a transaction pooler, which forwards none, the session waits on until it
// gets the lock or a timeout ends the wait, then finds its client gone). If
// the holder releases the key before then, the abandoned session is granted
// it and holds it, idle, until its transaction is aborted: exclusion is
// unaffected, but the next waiter waits that much longer. Acquire cannot
// wait for the server itself: all it has is the caller's transaction, whose
// connection the cancellation closed.
//
// # Methods
//
// MethodRow, the insert-then-delete technique: the transaction inserts the
// key into table entity_locks (primary key lock_key) and deletes it again
// at once. Nothing is ever committed, but until the transaction ends its
// index entry is in progress, and a concurrent insert of the same key waits
// on the unique check for the transaction to finish, then finds the row
// deleted and proceeds. It needs nothing but a unique index and READ
// COMMITTED, so it works on any SQL database; taking the same key twice in
// one transaction succeeds (the row is already deleted).
//
// MethodAdvisory, pg_advisory_xact_lock on a 64-bit hash of the key
// (hashtextextended): no table, no writes, no dead tuples. Two different
// keys can share a hash; they then exclude each other, which costs
// concurrency, never safety. Transaction-scoped advisory locks are safe
// behind PgBouncer's transaction pooling, unlike session ones.
//
// The default is MethodAdvisory: measured by BenchmarkMethods (the bench's
// figures are in the README), it takes a fraction of the insert-then-delete
// round trip and writes no WAL nor dead index entries, which the row
// technique leaves behind on every lock and vacuum must clean up.
package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/uptrace/bun"

	"github.com/batonhq/baton/schema"
)

// Method is how a key is locked.
type Method string

// Methods.
const (
	// MethodAdvisory uses pg_advisory_xact_lock on a hash of the key.
	MethodAdvisory Method = "advisory"
	// MethodRow inserts and deletes the key in table entity_locks.
	MethodRow Method = "row"
)

// ErrTimeout is returned when the lock was not obtained within the lock
// timeout.
var ErrTimeout = errors.New("lock not obtained within the lock timeout")

// Options tune Acquire.
type Options struct {
	// Schema is the PostgreSQL schema holding baton's entity_locks table
	// (MethodRow). Defaults to schema.Default ("baton").
	Schema string
	// Method defaults to MethodAdvisory.
	Method Method
	// Timeout, if positive, sets lock_timeout for the rest of the
	// transaction (whole milliseconds). Zero keeps the session's.
	Timeout time.Duration
}

// Acquire takes an exclusive lock on key inside tx, waiting for a
// transaction that holds it to end. The lock lasts until tx ends.
func Acquire(ctx context.Context, tx bun.Tx, key string, opts Options) error {
	if key == "" {
		return errors.New("lock key must not be empty")
	}
	if opts.Timeout > 0 {
		ms := max(1, opts.Timeout.Milliseconds())
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", ms)); err != nil {
			return fmt.Errorf("locking %q: setting lock timeout: %w", key, err)
		}
	}
	var err error
	switch opts.Method {
	case MethodAdvisory, "":
		_, err = tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtextextended(?, 0))`, key)
	case MethodRow:
		_, err = tx.ExecContext(ctx, schema.SQL(opts.Schema, `INSERT INTO {{.Schema}}.entity_locks (lock_key) VALUES (?)`), key)
		if err == nil {
			_, err = tx.ExecContext(ctx, schema.SQL(opts.Schema, `DELETE FROM {{.Schema}}.entity_locks WHERE lock_key = ?`), key)
		}
	default:
		return fmt.Errorf("locking %q: unknown method %q", key, opts.Method)
	}
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
			return fmt.Errorf("locking %q: %w", key, ErrTimeout)
		}
		return fmt.Errorf("locking %q: %w", key, err)
	}
	return nil
}
