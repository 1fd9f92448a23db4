package dbconn

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/batonhq/baton/internal/pgxconn"
)

// ErrNotReplicated says that PostgreSQL committed a transaction on the
// primary but stopped waiting for its synchronous standby to confirm it:
// the server answered the COMMIT with the warning "canceling wait for
// synchronous replication ... The transaction has already committed
// locally, but might not have been replicated to the standby". An HA
// manager does this when it drops a standby it thinks unhealthy
// (pg_auto_failover's wait_primary empties synchronous_standby_names
// and cancels the waiting backends), and so does any pg_cancel_backend or
// pg_terminate_backend of a session waiting at COMMIT. The data is in the
// primary's WAL and visible there; a failover before the standby catches
// up can lose it.
var ErrNotReplicated = errors.New("committed on the primary, but its synchronous standby did not confirm the commit: it may not survive a failover")

// WatchNotices returns a notice handler that counts, on each connection,
// the commits PostgreSQL reports as not replicated (see ErrNotReplicated),
// calls onNotReplicated (if not nil) for each, and passes every notice on
// to next (if not nil). Open installs it on its handles' connections; a
// handle the application opens itself (see Wrap) gets it from the pgx
// configuration it opens with:
//
//	cfg.OnNotice = dbconn.WatchNotices(cfg.OnNotice, nil)
//
// Without it, such a handle's batches and loads report nothing.
func WatchNotices(next pgconn.NoticeHandler, onNotReplicated func(*pgconn.Notice)) pgconn.NoticeHandler {
	return func(pc *pgconn.PgConn, n *pgconn.Notice) {
		if pgxconn.NotReplicatedNotice(n) {
			pgxconn.CountNotReplicated(pc)
			if onNotReplicated != nil {
				onNotReplicated(n)
			}
		}
		if next != nil {
			next(pc, n)
		}
	}
}

// NotReplicatedCommits counts the commits on the handle's connections
// that PostgreSQL reported as not confirmed by its synchronous standby,
// since the handle was opened (see ErrNotReplicated). It counts for
// handles from Open only; a wrapped handle reports 0.
func (db *DB) NotReplicatedCommits() int64 {
	if db.c == nil {
		return 0
	}
	return db.c.notReplicated.Load()
}
