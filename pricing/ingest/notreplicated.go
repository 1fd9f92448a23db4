package ingest

import (
	"fmt"

	"github.com/batonhq/baton/dbconn"
)

// NotReplicatedError is Load's error when the load committed on the
// primary but PostgreSQL reported that its synchronous standby did not
// confirm the commit (dbconn.ErrNotReplicated, which it wraps): the load
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
}

func (e *NotReplicatedError) Error() string {
	msg := fmt.Sprintf("load %d committed on the primary, but the synchronous standby did not confirm it: "+
		"it may not survive a failover. Once the cluster is stable, check that load %d is present (worker status --loads); "+
		"if it is missing, load the same files again (records already stored are skipped as re-delivered)", e.LoadID, e.LoadID)
	if e.CommitErr != nil {
		msg += fmt.Sprintf(" (the server then ended the session: %v)", e.CommitErr)
	}
	return msg
}

func (e *NotReplicatedError) Unwrap() error { return dbconn.ErrNotReplicated }
