package taskstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgconn"
)

// returningOldFrom is the first server_version_num whose RETURNING can
// name the old row (RETURNING OLD, PostgreSQL 18).
const returningOldFrom = 180000

// serverVersion is the server's server_version_num, read once by a Store
// (shared by its copies: Kind, WithDB) before its first statement whose
// text depends on it, or fixed by WithServerVersion. The servers behind
// one database handle are of one major version; a handle that is moved to
// an older server (a rollback of a major upgrade) is noticed by the
// statement failing to parse, which makes the next one read the version
// again.
type serverVersion struct {
	num atomic.Int64 // 0: not read yet
}

// versionNum returns the server's server_version_num, reading it on first
// use.
func (s *Store) versionNum(ctx context.Context) (int64, error) {
	if n := s.version.num.Load(); n != 0 {
		return n, nil
	}
	var n int64
	if err := s.db.QueryRowContext(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&n); err != nil {
		return 0, fmt.Errorf("reading the server's version: %w", err)
	}
	s.version.num.Store(n)
	return n, nil
}

// forgetVersionOn makes the next statement read the server's version again
// when err says the server did not know a statement's syntax (a form for
// newer servers sent to an older one).
func (s *Store) forgetVersionOn(err error) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42601" || pgErr.Code == "42P01" || pgErr.Code == "0A000") {
		s.version.num.Store(0)
	}
}
