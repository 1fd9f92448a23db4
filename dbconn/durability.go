package dbconn

import (
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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

// unreplicatedKey is the key of a connection's count of such commits in
// pgconn.PgConn.CustomData.
const unreplicatedKey = "baton.unreplicated_commits"

// NotReplicatedNotice reports whether n is PostgreSQL's warning that a
// commit was not confirmed by its synchronous standby (see
// ErrNotReplicated). The server sends it in the language of lc_messages;
// it is recognised in English only. Its SQLSTATE tells nothing: the
// terminating form shares 57P01 and severity WARNING with the notice an
// immediate shutdown sends every session, whose commit may not have
// happened at all.
func NotReplicatedNotice(n *pgconn.Notice) bool {
	if n == nil || severity(n) != "WARNING" {
		return false
	}
	return strings.Contains(n.Detail, "has already committed locally") ||
		strings.Contains(n.Message, "wait for synchronous replication")
}

func severity(n *pgconn.Notice) string {
	if n.SeverityUnlocalized != "" {
		return n.SeverityUnlocalized
	}
	return n.Severity
}

// WatchNotices returns a notice handler that counts, on each connection,
// the commits PostgreSQL reports as not replicated (NotReplicatedNotice),
// calls onNotReplicated (if not nil) for each, and passes every notice on
// to next (if not nil). Open installs it on its handles' connections; a
// handle the application opens itself (see Wrap) gets it from the pgx
// configuration it opens with:
//
//	cfg.OnNotice = dbconn.WatchNotices(cfg.OnNotice, nil)
//
// Without it, WatchConn reports nothing.
func WatchNotices(next pgconn.NoticeHandler, onNotReplicated func(*pgconn.Notice)) pgconn.NoticeHandler {
	return func(pc *pgconn.PgConn, n *pgconn.Notice) {
		if NotReplicatedNotice(n) {
			countOn(pc).Add(1)
			if onNotReplicated != nil {
				onNotReplicated(n)
			}
		}
		if next != nil {
			next(pc, n)
		}
	}
}

// countOn is pc's count of commits not replicated. The notice handler
// runs on the goroutine reading the connection's replies, which is the
// one using the connection, so the map needs no lock; the counter is
// atomic for readers such as a test's.
func countOn(pc *pgconn.PgConn) *atomic.Int64 {
	data := pc.CustomData()
	if c, ok := data[unreplicatedKey].(*atomic.Int64); ok {
		return c
	}
	c := new(atomic.Int64)
	data[unreplicatedKey] = c
	return c
}

// CommitWatch tells whether a commit on one connection, made after the
// watch began, was reported as not replicated. Begin it before the COMMIT
// (WatchConn, WatchPgx) and ask after it, while the connection is still
// held. The zero CommitWatch reports nothing.
type CommitWatch struct {
	n    *atomic.Int64
	seen int64
}

// WatchConn begins a CommitWatch on conn, a connection of a handle whose
// connections watch notices (every handle from Open; see WatchNotices).
func WatchConn(conn *sql.Conn) CommitWatch {
	var w CommitWatch
	_ = Raw(conn, func(c *pgx.Conn) error {
		w = WatchPgx(c)
		return nil
	})
	return w
}

// WatchPgx begins a CommitWatch on a pgx connection.
func WatchPgx(c *pgx.Conn) CommitWatch {
	if c == nil || c.PgConn() == nil {
		return CommitWatch{}
	}
	n := countOn(c.PgConn())
	return CommitWatch{n: n, seen: n.Load()}
}

// NotReplicated reports whether PostgreSQL has warned, since the watch
// began, that a commit on the connection was not confirmed by its
// synchronous standby (see ErrNotReplicated). It is true also when the
// warning came just before the server ended the session, when the COMMIT
// itself returns an error: the transaction committed on the primary.
func (w CommitWatch) NotReplicated() bool {
	return w.n != nil && w.n.Load() > w.seen
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
