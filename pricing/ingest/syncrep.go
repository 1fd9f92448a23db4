package ingest

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// syncState is whether the server makes a session's commits wait for a
// synchronous standby, as one session sees its settings.
type syncState struct {
	waits bool
	// why, when waits is false: the setting that makes commits not wait.
	why string
}

// sqlSyncState reads whether this session's commits wait for a synchronous
// standby: a standby is named (synchronous_standby_names), WAL is sent to
// standbys at all (max_wal_senders), and the session asks for the wait
// (synchronous_commit on, remote_write or remote_apply).
const sqlSyncState = `SELECT current_setting('synchronous_standby_names'), current_setting('synchronous_commit'),
       current_setting('max_wal_senders')::int`

// readSyncState reads the session's synchronous-replication settings.
//
// Read after a COMMIT on the session (or any session of the server), it
// says whether that commit could have returned without waiting for a
// standby because replication was turned off: a server that changes
// synchronous_standby_names (an HA manager emptying it, as
// pg_auto_failover's wait_primary does) signals the reload to every
// session before its checkpointer, which is what stops commits waiting,
// and a session takes a pending reload before its next statement. So a
// commit that skipped the wait, or whose wait was ended without the
// "canceling wait" warning because the standbys were dropped, is
// followed by a statement that sees the setting empty.
func readSyncState(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (syncState, error) {
	var names, commit string
	var senders int
	if err := q.QueryRow(ctx, sqlSyncState).Scan(&names, &commit, &senders); err != nil {
		return syncState{}, fmt.Errorf("reading the server's synchronous replication settings: %w", err)
	}
	switch {
	case names == "":
		return syncState{why: "synchronous_standby_names is empty"}, nil
	case senders == 0:
		return syncState{why: "max_wal_senders is 0"}, nil
	case commit != "on" && commit != "remote_write" && commit != "remote_apply":
		return syncState{why: "synchronous_commit is " + commit}, nil
	}
	return syncState{waits: true}, nil
}
