package ingest

import (
	"fmt"

	"github.com/batonhq/baton/dbconn"
)

// NotReplicatedError is Load's error when the load committed on the
// primary but PostgreSQL reported that its synchronous standby did not
// confirm the commit (dbconn.ErrNotReplicated, which it wraps), or when
// the commit did not wait for a synchronous standby at all: replication
// was on as the load began and off after its commit, or, with
// Options.ConfirmStandby, off after its commit whatever it was before. The load
// is stored and its Report is complete, but a failover before the standby
// catches up can lose it. Whether it survived shows in the loads table
// (worker status --loads). Loading the same files again is safe: records
// already stored are skipped as re-delivered, and tiers already in force
// change nothing.
type NotReplicatedError struct {
	LoadID int64
	// CommitErr is the COMMIT's own error when the server ended the
	// session right after its warning (pg_terminate_backend, a fast
	// shutdown); nil when the COMMIT returned success.
	CommitErr error
	// Unsynchronized, when not empty, is why the commit is not known to
	// have waited for a synchronous standby: the setting that was off
	// after it, or why that could not be checked. The server sent no
	// warning then.
	Unsynchronized string
}

func (e *NotReplicatedError) Error() string {
	what := "the synchronous standby did not confirm it"
	if e.Unsynchronized != "" {
		what = "it is not known to have waited for a synchronous standby (after its commit, " + e.Unsynchronized + ")"
	}
	msg := fmt.Sprintf("load %d committed on the primary, but %s: "+
		"it may not survive a failover. Once the cluster is stable, check that load %d is present (worker status --loads); "+
		"if it is missing, load the same files again (records already stored are skipped as re-delivered)", e.LoadID, what, e.LoadID)
	if e.CommitErr != nil {
		msg += fmt.Sprintf(" (the server then ended the session: %v)", e.CommitErr)
	}
	return msg
}

func (e *NotReplicatedError) Unwrap() error { return dbconn.ErrNotReplicated }
