// Package dberr classifies the errors of database statements the way the
// protocol and the worker process need them classified, in one place for
// every service that writes task rows (distributor, heartbeat) and for the
// command that runs them:
//
//   - UnknownOutcome: the statement may or may not have applied (the
//     server did not report an error; the connection failed or our side
//     gave up after sending). The caller re-reads what it wrote.
//   - Transient: the error says nothing about the data (connection loss,
//     timeouts, lock conflicts, a server going away, a checkpoint moved by
//     a late commit of the same claim), so the work is retried rather than
//     counted as a failure.
//   - TooLong: the transaction ran out of time; retried in smaller pieces.
//   - Unreachable: the database cannot be reached or is not answering, as
//     opposed to refusing a statement (an outage, reported once).
//   - RefusesClient: the server refuses this client whatever it waits for
//     (authentication, an unknown database), so waiting for it is useless.
//   - WorthWaiting: whether a process that cannot start for err should
//     wait and try again (the database is down, starting, or being
//     migrated) or give up at once.
package dberr

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/schema"
)

// UnknownOutcome reports whether err leaves it open whether the statement
// applied. A server-reported error means the statement was rolled back; a
// connection failure or a timeout on our side after sending does not say.
func UnknownOutcome(err error) bool {
	var pgErr *pgconn.PgError
	return !errors.As(err, &pgErr)
}

// Transient reports errors that say nothing about the data: the connection
// or server went away, or a timeout or lock conflict hit.
func Transient(err error) bool {
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	if errors.Is(err, partition.ErrCheckpointMoved) {
		return true // an earlier commit of ours applied late: retry from the new checkpoint
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case len(pgErr.Code) >= 2 && (pgErr.Code[:2] == "08" || pgErr.Code[:2] == "57" || pgErr.Code[:2] == "53"):
			return true // connection exception, operator intervention (shutdown, cancel, timeout), resources
		case pgErr.Code == "40001" || pgErr.Code == "40P01" || pgErr.Code == "55P03":
			return true // serialization failure, deadlock, lock timeout
		case pgErr.Code == "25P03":
			return true // idle_in_transaction_session_timeout ended the session
		}
		return false
	}
	return pgconn.SafeToRetry(err) || pgconn.Timeout(err) || errors.Is(err, pgx.ErrTxClosed)
}

// TooLong reports a transaction that ran out of time rather than failed:
// the server cancelled a statement (57014 query_canceled: statement_timeout,
// or a cancel request, which carries the same code whatever the server's
// message language), or the context's deadline passed. Such work is retried
// in smaller pieces, not counted as a failure (it is also Transient).
func TooLong(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "57014"
}

// Unreachable reports errors that mean the database cannot be reached or
// is not answering (connection refused or lost, timeouts, a server shutting
// down or starting), as opposed to refusing a statement. A server that
// answered a connection by refusing the client (RefusesClient) was
// reached; a statement abandoned because its context was cancelled says
// nothing about the database.
func Unreachable(err error) bool {
	if err == nil || RefusesClient(err) || errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "57P01", "57P02", "57P03": // admin or crash shutdown, cannot connect now
			return true
		}
		return strings.HasPrefix(pe.Code, "08")
	}
	// A connection closed under pgx, or a statement that may not have
	// reached the server.
	return pgconn.SafeToRetry(err) || errors.Is(err, pgx.ErrTxClosed) || strings.Contains(err.Error(), "conn closed")
}

// RefusesClient reports errors that no wait cures: the server rejected the
// client's credentials (class 28) or the database does not exist (3D).
func RefusesClient(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && len(pe.Code) >= 2 {
		switch pe.Code[:2] {
		case "28", "3D":
			return true
		}
	}
	return false
}

// WorthWaiting reports whether waiting may cure err, an error opening the
// database and checking its schema: the server is down, starting or
// unreachable, or a migration running beside this start has not finished
// (schema.ErrOutdated), rather than the server refusing this client
// (RefusesClient), the schema being newer than this binary
// (schema.ErrTooNew) or not existing at all (schema.MissingError), which
// no wait changes. A cancelled context is not
// worth waiting for either: whoever cancelled it is no longer waiting.
func WorthWaiting(err error) bool {
	switch {
	case err == nil, errors.As(err, new(*schema.MissingError)):
		return false
	case errors.Is(err, schema.ErrOutdated):
		return true
	case errors.Is(err, schema.ErrTooNew), errors.Is(err, context.Canceled):
		return false
	}
	return !RefusesClient(err)
}
