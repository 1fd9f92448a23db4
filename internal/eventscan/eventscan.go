// Package eventscan reads rows of baton's events table (a partition's
// ownership history) the one way every reader does: package partition's
// History and RecentEvents, and the console's notable events. It has no
// API compatibility guarantees.
package eventscan

import (
	"database/sql"
	"fmt"
	"time"
)

// Row is one row of the events table. Its fields are partition.HistoryEntry's,
// in the same order and of the same types (Kind is partition.EventKind),
// so that a caller converts it: partition.HistoryEntry(e). A field added to one
// and not the other stops that conversion compiling.
type Row[K ~string] struct {
	ID           int64
	At           time.Time
	Key          string
	Kind         K
	Version      int64
	Worker       string
	PrevOwner    string
	PrevBeatAt   *time.Time
	Position     *int64
	Items        *int64
	Attempts     *int
	TakeoverTime *time.Duration
	Detail       string
}

// Columns is the select list Scan reads, over the events table aliased e;
// takeoverMS is the expression of the takeover time in milliseconds
// (e.takeover_ms, or one that looks it up elsewhere).
func Columns(takeoverMS string) string {
	return `e.event_id, e.at, e.partition_key, e.kind, e.version, coalesce(e.worker, ''), coalesce(e.prev_owner, ''),
		       e.prev_heartbeat_at, e.position, e.items, e.attempts, ` + takeoverMS + `, coalesce(e.detail, '')`
}

// Scan reads every row of rows, selected with Columns, as the caller's
// event type (as converts: partition.HistoryEntry(e)), and closes rows.
func Scan[K ~string, T any](rows *sql.Rows, as func(Row[K]) T) ([]T, error) {
	defer rows.Close()
	var out []T
	for rows.Next() {
		var e Row[K]
		var prev sql.NullTime
		var pos, items, ms sql.NullInt64
		var attempts sql.NullInt32
		if err := rows.Scan(&e.ID, &e.At, &e.Key, &e.Kind, &e.Version, &e.Worker, &e.PrevOwner,
			&prev, &pos, &items, &attempts, &ms, &e.Detail); err != nil {
			return nil, fmt.Errorf("scanning an event: %w", err)
		}
		if prev.Valid {
			e.PrevBeatAt = &prev.Time
		}
		if pos.Valid {
			e.Position = &pos.Int64
		}
		if items.Valid {
			e.Items = &items.Int64
		}
		if attempts.Valid {
			a := int(attempts.Int32)
			e.Attempts = &a
		}
		if ms.Valid {
			d := time.Duration(ms.Int64) * time.Millisecond
			e.TakeoverTime = &d
		}
		out = append(out, as(e))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("scanning events: %w", err)
	}
	return out, nil
}
