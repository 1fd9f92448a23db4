package ingest

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/uptrace/bun/dialect/pgdialect"
)

// LoadInfo is one committed load, as the loads table records it.
type LoadInfo struct {
	LoadID             int64      `json:"load_id"`
	StartedAt          time.Time  `json:"started_at"`
	FinishedAt         *time.Time `json:"finished_at"`
	TiersFile          string     `json:"tiers_file,omitempty"`
	RecordsFile        string     `json:"records_file,omitempty"`
	TierRows           int64      `json:"tier_rows"`
	RecordsAccepted    int64      `json:"records_accepted"`
	RecordsRedelivered int64      `json:"records_redelivered"`
	RowsRejected       int64      `json:"rows_rejected"`
	RecordsPruned      int64      `json:"records_pruned"`
	PrunedAt           *time.Time `json:"pruned_at,omitempty"`
}

// Loads returns the committed loads, newest first: those named by ids, or
// the newest limit when ids is empty. A load id missing from the result
// was never committed (or did not survive a failover: see
// NotReplicatedError).
func (s *Store) Loads(ctx context.Context, limit int, ids ...int64) ([]LoadInfo, error) {
	q := `SELECT load_id, started_at, finished_at, coalesce(tiers_file, ''), coalesce(records_file, ''), tier_rows,
	             records_accepted, records_redelivered, rows_rejected, records_pruned, pruned_at
	      FROM {{.Schema}}.loads`
	args := []any{}
	if len(ids) > 0 {
		q += ` WHERE load_id = ANY(?::bigint[]) ORDER BY load_id DESC`
		args = append(args, pgdialect.Array(ids))
	} else {
		q += ` ORDER BY load_id DESC LIMIT ?`
		args = append(args, limit)
	}
	rows, err := s.t.DB.QueryContext(ctx, s.t.SQL(q), args...)
	if err != nil {
		return nil, fmt.Errorf("reading loads: %w", err)
	}
	defer rows.Close()
	var out []LoadInfo
	for rows.Next() {
		var l LoadInfo
		var finished, pruned sql.NullTime
		if err := rows.Scan(&l.LoadID, &l.StartedAt, &finished, &l.TiersFile, &l.RecordsFile, &l.TierRows,
			&l.RecordsAccepted, &l.RecordsRedelivered, &l.RowsRejected, &l.RecordsPruned, &pruned); err != nil {
			return nil, fmt.Errorf("reading loads: %w", err)
		}
		if finished.Valid {
			l.FinishedAt = &finished.Time
		}
		if pruned.Valid {
			l.PrunedAt = &pruned.Time
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading loads: %w", err)
	}
	return out, nil
}
