package taskstore

import (
	"context"
	"fmt"
	"time"

	"github.com/batonhq/baton/partition"
	"github.com/uptrace/bun"
	"go.opentelemetry.io/otel/trace"
)

// traceparent is the W3C trace context of the span in ctx, or "" when
// there is none: Advance stores it with the checkpoint, so that whoever
// resumes from that checkpoint can link to the batch that committed it.
func traceparent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags())
}

// WithoutEvents returns a Store over the same database that records no
// history: the protocol's statements run without their events insert.
func (s *Store) WithoutEvents() *Store {
	c := *s
	c.noEvents = true
	return &c
}

// events returns cte (a ", e AS (INSERT INTO {{.Schema}}.events ...)" clause) and its
// arguments, or nothing when the store records no history.
func (s *Store) events(cte string, args ...any) (string, []any) {
	if s.noEvents {
		return "", nil
	}
	return cte, args
}

// RecordFirstBatch is InTx(tx, owner).RecordFirstBatch(ctx, l, position,
// items, prevBeat).
func (s *Store) RecordFirstBatch(ctx context.Context, tx bun.Tx, owner string, l partition.Lease, position, items int64, prevBeat time.Time) error {
	return s.InTx(tx, owner).RecordFirstBatch(ctx, l, position, items, prevBeat)
}

// RecordFirstBatch records, inside a claim's first committed batch, that
// processing started: position and items of the batch and, after a
// takeover, the time from the previous owner's last heartbeat (prevBeat,
// database clock) to this commit. It commits or rolls back with the batch.
func (t Txn) RecordFirstBatch(ctx context.Context, l partition.Lease, position, items int64, prevBeat time.Time) error {
	if t.s.noEvents {
		return nil
	}
	var prev any
	if !prevBeat.IsZero() {
		prev = prevBeat
	}
	_, err := t.tx.ExecContext(ctx, t.s.sql(`
		INSERT INTO {{.Schema}}.events (task_kind, partition_key, kind, version, worker, position, items, prev_heartbeat_at, takeover_ms)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?::timestamptz,
		        (extract(epoch FROM clock_timestamp() - ?::timestamptz) * 1000)::bigint)`),
		t.s.kind, l.Key, partition.EventFirstBatch, l.Version, t.owner, position, items, prev, prev)
	if err != nil {
		return fmt.Errorf("recording first batch of %s: %w", l, err)
	}
	return nil
}

// Record writes an event that no protocol statement carries: a fence
// rejection (its transaction rolled back) or a lost lease.
func (s *Store) Record(ctx context.Context, owner string, kind partition.EventKind, l partition.Lease, detail string) error {
	if s.noEvents {
		return nil
	}
	if _, err := s.db.ExecContext(ctx, s.sql(`
		INSERT INTO {{.Schema}}.events (task_kind, partition_key, kind, version, worker, detail) VALUES (?, ?, ?, ?, ?, nullif(?, ''))`),
		s.kind, l.Key, kind, l.Version, owner, truncate(detail, 4000)); err != nil {
		return fmt.Errorf("recording %s event of %s: %w", kind, l, err)
	}
	return nil
}

// PruneEvents deletes events older than retention, and the oldest beyond
// the newest maxRows, so the history stays bounded: the events of every
// kind, which share the table and its bounds. It returns how many
// rows it deleted. Both bounds use an index.
func (s *Store) PruneEvents(ctx context.Context, retention time.Duration, maxRows int64) (int64, error) {
	res, err := s.db.ExecContext(ctx, s.sql(`
		DELETE FROM {{.Schema}}.events
		WHERE at < now() - ?::interval
		   OR event_id <= (SELECT max(event_id) FROM {{.Schema}}.events) - ?`), interval(retention), maxRows)
	if err != nil {
		return 0, fmt.Errorf("pruning events: %w", err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}
