package partition

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/uptrace/bun/dialect/pgdialect"
)

// States reported by Status.
const (
	StatePending     = "pending"     // unowned, work waiting
	StateConfirming  = "confirming"  // taken over under a live lease, confirming before its first batch
	StateActive      = "active"      // owned under a live lease, work waiting
	StateCaughtUp    = "caught_up"   // owned under a live lease, nothing waiting (leader mode)
	StateStale       = "stale"       // owner's lease expired; claimable if work waits
	StateBackoff     = "backoff"     // failed recently; claimable after the back-off
	StateQuarantined = "quarantined" // failed too often; needs retry
	StateDone        = "done"        // unowned, nothing waiting
)

// stateOrder ranks the states, most pressing first: a partition split
// into segments (see distributor.Splitter) is in the most pressing state
// of its own row and its segments not caught up.
var stateOrder = []string{StateQuarantined, StateStale, StateConfirming, StateActive, StateBackoff, StatePending, StateCaughtUp, StateDone}

// PartitionStatus is one partition as an operator sees it: its task row
// and, if it was split, the segments not caught up, whose items count as
// its own. Segment rows are never listed as partitions.
type PartitionStatus struct {
	Key           string // the partition
	Owner         string // worker name (without instance suffix) holding the partition's own row, "" if none
	OwnerInstance string // that owner's instance id (name#suffix), "" if none
	// State is quarantined, stale, confirming, active, caught_up,
	// backoff, pending or done: for a split partition the most pressing
	// of its own row's and its segments' (a segment quarantined makes it
	// quarantined, one being processed makes it active, ...).
	State        string
	Version      int64          // of the partition's own row: bumped by every change of its ownership
	HeartbeatAge *time.Duration // nil when its own row is unowned
	// Processed is the items processed: for a partition never split its
	// checkpoint position; for a split one, its items less Pending (its
	// segments may have processed items past DoneThrough).
	Processed int64
	// Pending is the items available but not processed, its own row's
	// and its segments'.
	Pending int64
	// DoneThrough is the processed prefix: items up to it are all
	// processed (its checkpoint position, or the position of its first
	// segment not caught up if that is lower).
	DoneThrough int64
	// Segments is how many segments of it are not caught up, and
	// SegmentsOwned how many of those a worker owns under a live lease.
	Segments, SegmentsOwned int
	// Attempts is the failed attempts since the last success: its own
	// row's, or a segment's if more.
	Attempts int
	// Error is its own row's last failure, or else its first failing
	// segment's, prefixed with the segment's items ("items 1501–2524: ...");
	// "" if none.
	Error          string
	Checkpoint     []byte         // processor state stored with its own row's position (JSON)
	LeaseRemaining *time.Duration // nil when its own row is unowned
	Generation     int64          // of the partition's output: 1, one more after each rewind (Store.Rewind)
}

// WorkerStatus is one live worker instance.
type WorkerStatus struct {
	InstanceID   string        // name#suffix, unique per process
	Name         string        // the configured worker name
	Hostname     string        // where it runs
	PID          int           // its process id
	Mode         string        // lock or leader
	Wake         string        // how it learns of new work: "listen" (notifications, polling as the fallback) or "poll"
	StartedAt    time.Time     // registration time
	HeartbeatAge time.Duration // since its last heartbeat, database clock
	Owned        int           // task rows it owns under a live lease: partitions and segments
}

// stateSQL is the state of task row t, as Status reports it.
func stateSQL(t string) string {
	return strings.NewReplacer("t.", t+".").Replace(`CASE
		         WHEN t.failed_at IS NOT NULL THEN 'quarantined'
		         WHEN t.owner IS NOT NULL AND t.lease_expires_at <= now() THEN 'stale'
		         WHEN t.owner IS NOT NULL AND t.available > t.position
		              AND EXISTS (SELECT 1 FROM {{.Schema}}.events e WHERE e.partition_key = t.partition_key
		                             AND e.task_kind = t.kind AND e.version = t.version AND e.kind = 'takeover')
		              AND NOT EXISTS (SELECT 1 FROM {{.Schema}}.events e WHERE e.partition_key = t.partition_key
		                                 AND e.task_kind = t.kind AND e.version = t.version AND e.kind = 'first_batch') THEN 'confirming'
		         WHEN t.owner IS NOT NULL AND t.available > t.position THEN 'active'
		         WHEN t.owner IS NOT NULL THEN 'caught_up'
		         WHEN t.attempts > 0 AND t.lease_expires_at > now() AND t.available > t.position THEN 'backoff'
		         WHEN t.available > t.position THEN 'pending'
		         ELSE 'done'
		       END`)
}

// statusSQL reads every partition of a kind, not its segments, with the
// segments not caught up folded in (through the tasks_segments index).
var statusSQL = `
		SELECT t.partition_key, coalesce(t.owner, ''), t.version,
		       CASE WHEN s.rank < array_position(?::text[], ` + stateSQL("t") + `)
		            THEN (?::text[])[s.rank] ELSE ` + stateSQL("t") + ` END,
		       (extract(epoch FROM now() - t.heartbeat_at) * 1000000)::bigint,
		       CASE WHEN isfinite(t.lease_expires_at) THEN (extract(epoch FROM t.lease_expires_at - now()) * 1000000)::bigint END,
		       t.position - coalesce(s.pending, 0),
		       (t.available - t.position) + coalesce(s.pending, 0),
		       least(t.position, coalesce(s.first_pending, t.position)),
		       coalesce(s.segments, 0), coalesce(s.held, 0),
		       greatest(t.attempts, coalesce(s.attempts, 0)),
		       coalesce(t.last_error, s.last_error, ''), t.checkpoint, t.generation
		FROM {{.Schema}}.tasks t
		LEFT JOIN LATERAL (
		       SELECT count(*) AS segments, sum(g.available - g.position) AS pending, min(g.position) AS first_pending,
		              count(*) FILTER (WHERE g.owner IS NOT NULL AND g.lease_expires_at > now()) AS held,
		              max(g.attempts) AS attempts,
		              min(array_position(?::text[], ` + stateSQL("g") + `)) AS rank,
		              (array_agg(format('items %s–%s: %s', g.position + 1, g.available, g.last_error) ORDER BY g.partition_key)
		                 FILTER (WHERE g.last_error IS NOT NULL))[1] AS last_error
		         FROM {{.Schema}}.tasks g
		        WHERE g.kind = t.kind AND g.segment_of = t.partition_key AND g.position < g.available) s ON true
		WHERE t.kind = ? AND t.segment_of IS NULL
		ORDER BY t.partition_key`

// Status reads every partition of s's kind (ordered by key in byte order),
// each with its segments not caught up folded in (segment rows are not
// listed), and every live worker of that kind.
func (s *Store) Status(ctx context.Context) ([]PartitionStatus, []WorkerStatus, error) {
	order := pgdialect.Array(stateOrder)
	rows, err := s.db.QueryContext(ctx, s.sql(statusSQL), order, order, order, s.kind)
	if err != nil {
		return nil, nil, fmt.Errorf("reading partition status: %w", err)
	}
	defer rows.Close()
	var parts []PartitionStatus
	for rows.Next() {
		var p PartitionStatus
		var age, remaining sql.NullInt64
		if err := rows.Scan(&p.Key, &p.OwnerInstance, &p.Version, &p.State, &age, &remaining,
			&p.Processed, &p.Pending, &p.DoneThrough, &p.Segments, &p.SegmentsOwned,
			&p.Attempts, &p.Error, &p.Checkpoint, &p.Generation); err != nil {
			return nil, nil, fmt.Errorf("reading partition status: %w", err)
		}
		p.Owner = InstanceName(p.OwnerInstance)
		if p.OwnerInstance != "" && age.Valid {
			d := time.Duration(age.Int64) * time.Microsecond
			p.HeartbeatAge = &d
		}
		if p.OwnerInstance != "" && remaining.Valid {
			d := time.Duration(remaining.Int64) * time.Microsecond
			p.LeaseRemaining = &d
		}
		parts = append(parts, p)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("reading partition status: %w", err)
	}

	wrows, err := s.db.QueryContext(ctx, s.sql(`
		SELECT w.instance_id, w.name, w.hostname, w.pid, w.mode, w.wake, w.started_at,
		       (extract(epoch FROM now() - w.heartbeat_at) * 1000000)::bigint,
		       (SELECT count(*) FROM {{.Schema}}.tasks t
		        WHERE t.owner = w.instance_id AND t.kind = w.kind AND t.lease_expires_at > now())
		FROM {{.Schema}}.workers w
		WHERE w.kind = ? AND w.expires_at > now() AND w.stopped_at IS NULL
		ORDER BY w.name, w.instance_id`), s.kind)
	if err != nil {
		return nil, nil, fmt.Errorf("reading worker status: %w", err)
	}
	defer wrows.Close()
	var workers []WorkerStatus
	for wrows.Next() {
		var w WorkerStatus
		var age int64
		if err := wrows.Scan(&w.InstanceID, &w.Name, &w.Hostname, &w.PID, &w.Mode, &w.Wake, &w.StartedAt, &age, &w.Owned); err != nil {
			return nil, nil, fmt.Errorf("reading worker status: %w", err)
		}
		w.HeartbeatAge = time.Duration(age) * time.Microsecond
		workers = append(workers, w)
	}
	if err := wrows.Err(); err != nil {
		return nil, nil, fmt.Errorf("reading worker status: %w", err)
	}
	return parts, workers, nil
}

// InstanceSeparator separates a worker's name from its instance suffix in
// the owner column.
const InstanceSeparator = "#"

// InstanceName returns the worker name part of an instance id.
func InstanceName(instance string) string {
	for i := len(instance) - 1; i >= 0; i-- {
		if instance[i] == InstanceSeparator[0] {
			return instance[:i]
		}
	}
	return instance
}
