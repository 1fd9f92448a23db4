package partition

import (
	"context"
	"database/sql"
	"fmt"
	"time"
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

// PartitionStatus is one task row as an operator sees it.
type PartitionStatus struct {
	Key            string         // the partition
	Owner          string         // worker name (without instance suffix), "" if none
	OwnerInstance  string         // owner's instance id (name#suffix), "" if none
	State          string         // quarantined, stale, confirming, active, caught_up, backoff, pending or done
	Version        int64          // bumped by every change of ownership
	HeartbeatAge   *time.Duration // nil when unowned
	Processed      int64          // items processed (the checkpoint position)
	Pending        int64          // items available but not processed
	Attempts       int            // failed attempts since the last success
	Error          string         // the last failure, "" if none
	Checkpoint     []byte         // processor state stored with the position (JSON)
	LeaseRemaining *time.Duration // nil when unowned
	Generation     int64          // of the partition's output: 1, one more after each rewind (Store.Rewind)
}

// WorkerStatus is one live worker instance.
type WorkerStatus struct {
	InstanceID   string        // name#suffix, unique per process
	Name         string        // the configured worker name
	Hostname     string        // where it runs
	PID          int           // its process id
	Mode         string        // lock or leader
	Wake         string        // WakeListen or WakePoll
	StartedAt    time.Time     // registration time
	HeartbeatAge time.Duration // since its last heartbeat, database clock
	Held         int           // partitions under a live lease
}

// Status reads every partition of s's kind (ordered by key in byte order)
// and every live worker of that kind.
func (s *Store) Status(ctx context.Context) ([]PartitionStatus, []WorkerStatus, error) {
	rows, err := s.db.QueryContext(ctx, s.sql(`
		SELECT partition_key, coalesce(owner, ''), version,
		       CASE
		         WHEN failed_at IS NOT NULL THEN 'quarantined'
		         WHEN owner IS NOT NULL AND lease_expires_at <= now() THEN 'stale'
		         WHEN owner IS NOT NULL AND available > position
		              AND EXISTS (SELECT 1 FROM {{.Schema}}.events e WHERE e.partition_key = t.partition_key
		                             AND e.task_kind = t.kind AND e.version = t.version AND e.kind = 'takeover')
		              AND NOT EXISTS (SELECT 1 FROM {{.Schema}}.events e WHERE e.partition_key = t.partition_key
		                                 AND e.task_kind = t.kind AND e.version = t.version AND e.kind = 'first_batch') THEN 'confirming'
		         WHEN owner IS NOT NULL AND available > position THEN 'active'
		         WHEN owner IS NOT NULL THEN 'caught_up'
		         WHEN attempts > 0 AND lease_expires_at > now() AND available > position THEN 'backoff'
		         WHEN available > position THEN 'pending'
		         ELSE 'done'
		       END,
		       (extract(epoch FROM now() - heartbeat_at) * 1000000)::bigint,
		       CASE WHEN isfinite(lease_expires_at) THEN (extract(epoch FROM lease_expires_at - now()) * 1000000)::bigint END,
		       position, available - position, attempts, coalesce(last_error, ''), checkpoint, generation
		FROM {{.Schema}}.tasks t
		WHERE t.kind = ?
		ORDER BY partition_key`), s.kind)
	if err != nil {
		return nil, nil, fmt.Errorf("reading partition status: %w", err)
	}
	defer rows.Close()
	var parts []PartitionStatus
	for rows.Next() {
		var p PartitionStatus
		var age, remaining sql.NullInt64
		if err := rows.Scan(&p.Key, &p.OwnerInstance, &p.Version, &p.State, &age, &remaining,
			&p.Processed, &p.Pending, &p.Attempts, &p.Error, &p.Checkpoint, &p.Generation); err != nil {
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
		if err := wrows.Scan(&w.InstanceID, &w.Name, &w.Hostname, &w.PID, &w.Mode, &w.Wake, &w.StartedAt, &age, &w.Held); err != nil {
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
