package pgxconn

import (
	"database/sql"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// unreplicatedKey is the key of a connection's count of commits not
// confirmed by the synchronous standby in pgconn.PgConn.CustomData.
const unreplicatedKey = "baton.unreplicated_commits"

// NotReplicatedNotice reports whether n is PostgreSQL's warning that a
// commit was not confirmed by its synchronous standby
// (dbconn.ErrNotReplicated). The server sends it in the language of
// lc_messages; it is recognised in English only. Its SQLSTATE tells
// nothing: the terminating form shares 57P01 and severity WARNING with
// the notice an immediate shutdown sends every session, whose commit may
// not have happened at all.
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

// CountNotReplicated counts a commit reported as not replicated on pc
// (see dbconn.WatchNotices, which calls it from the notice handler).
func CountNotReplicated(pc *pgconn.PgConn) { countOn(pc).Add(1) }

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
// connections watch notices (every handle from dbconn.Open; see
// dbconn.WatchNotices).
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
// synchronous standby. It is true also when the warning came just before
// the server ended the session, when the COMMIT itself returns an error:
// the transaction committed on the primary.
func (w CommitWatch) NotReplicated() bool {
	return w.n != nil && w.n.Load() > w.seen
}
