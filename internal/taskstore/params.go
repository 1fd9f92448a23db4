package taskstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"

	"github.com/batonhq/baton/dbconn"
)

// PrepareWhen returns a copy of s whose coordination statements (Heartbeat,
// Candidates, StaleCandidates, FairShareLoad), run at every heartbeat and
// poll of every worker, and the statements that claim unowned partitions
// with their first batches (FenceUnownedGroup, ClaimAdvanceGroup),
// are prepared once per connection and their plans
// reused whenever direct reports true at the time of the call. Otherwise,
// and by default, they are sent as unnamed statements, parsed and planned
// each time, which is what a transaction pooler needs: a named prepared
// statement lives in one server session, and a pooler hands each
// transaction whichever session is free. direct must report true only for
// a handle whose connections reach PostgreSQL itself (dbconn.DB.Direct).
//
// Either way these statements send their values as parameters, not
// formatted into the text, so the statement text never changes.
func (s *Store) PrepareWhen(direct func() bool) *Store {
	c := *s
	c.direct = direct
	return &c
}

// rawQuerier is the database/sql handle under a bun handle.
type rawQuerier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// query runs q, whose parameters are $1, $2, ..., sending args as
// parameters; on a direct connection (PrepareWhen) it is prepared once per
// connection and its plan cached.
func (s *Store) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	var raw rawQuerier
	switch db := s.db.(type) {
	case *bun.DB:
		raw = db.DB
	case *dbconn.DB:
		raw = db.DB.DB
	case bun.Conn:
		raw = db.Conn
	case bun.Tx:
		raw = db.Tx
	case *bun.Tx:
		raw = db.Tx
	default:
		return nil, fmt.Errorf("unsupported database handle %T: want a *dbconn.DB, *bun.DB, bun.Conn or bun.Tx", s.db)
	}
	if s.direct != nil && s.direct() {
		args = append([]any{pgx.QueryExecModeCacheStatement}, args...)
	}
	return raw.QueryContext(ctx, s.sql(q), args...)
}

// micros is d in whole microseconds, for a $n::bigint * interval '1
// microsecond' parameter.
func micros(d time.Duration) int64 { return d.Microseconds() }

// queryTx is query inside tx: the same parameters, and on a direct
// connection the same prepared statements (one per connection).
func (s *Store) queryTx(ctx context.Context, tx bun.Tx, q string, args ...any) (*sql.Rows, error) {
	if s.direct != nil && s.direct() {
		args = append([]any{pgx.QueryExecModeCacheStatement}, args...)
	}
	return tx.Tx.QueryContext(ctx, s.sql(q), args...)
}

// interval is d as a PostgreSQL interval literal, for a ?::interval
// parameter.
func interval(d time.Duration) string { return fmt.Sprintf("%d microseconds", d.Microseconds()) }
