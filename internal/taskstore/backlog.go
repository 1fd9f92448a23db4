package taskstore

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/schema"
)

// BacklogParams says how ReadBacklog reads the task table's totals.
type BacklogParams struct {
	// Now is the time the figures are for; nil is the database clock
	// (tests move it to back-dated fixtures).
	Now *time.Time
	// Window is how far back the reference sample for the rate is looked
	// for: the sample nearest to Now − Window among those at least
	// MinWindow old.
	Window, MinWindow time.Duration
	// Record writes a sample of the current totals for each kind whose
	// newest sample is older than SampleGap, and deletes samples older
	// than Keep. Without it the statement only reads (a read-only role
	// can run it).
	Record          bool
	SampleGap, Keep time.Duration
}

// BacklogRow is one kind's totals as ReadBacklog read them.
type BacklogRow struct {
	Kind string
	At   time.Time // the time the figures are for (Params.Now or the database clock)
	// PendingItems is available − position summed over the kind's task
	// rows (partitions and segments) that are not quarantined;
	// PendingPartitions counts the partitions (a partition and its
	// segments once) with such a row with pending items, PendingRows the
	// rows.
	PendingItems, PendingPartitions, PendingRows int64
	// QuarantinedItems and QuarantinedPartitions are the same over
	// quarantined rows (failed_at set).
	QuarantinedItems, QuarantinedPartitions int64
	// OldestPending is the earliest pending_since of a pending row that is
	// not quarantined; zero when there is none.
	OldestPending time.Time
	Workers       int // live workers of the kind (registration not expired, not stopped)
	// RefAt is the reference sample's time (zero when none qualifies),
	// Processed the items processed from it to At and MeanWorkers the
	// mean live-worker count of the samples from it on and At's.
	RefAt       time.Time
	Processed   int64
	MeanWorkers float64
}

// BacklogSample is one stored sample of a kind's totals.
type BacklogSample struct {
	At                             time.Time
	PendingItems, QuarantinedItems int64
	Workers                        int
}

// backlogTotals computes each kind's totals in one pass over the task
// table (a sequential scan: nothing that checkpoints change is indexed)
// and the live workers in one over the workers table.
const backlogTotals = `
	p AS (SELECT coalesce(?::timestamptz, now()) AS now),
	cur AS (
		SELECT t.kind,
		       coalesce(sum(t.available - t.position) FILTER (WHERE t.failed_at IS NULL), 0)::bigint AS pending_items,
		       count(DISTINCT coalesce(t.segment_of, t.partition_key))
		             FILTER (WHERE t.available > t.position AND t.failed_at IS NULL) AS pending_partitions,
		       count(*) FILTER (WHERE t.available > t.position AND t.failed_at IS NULL) AS pending_rows,
		       coalesce(sum(t.available - t.position) FILTER (WHERE t.failed_at IS NOT NULL), 0)::bigint AS quarantined_items,
		       count(DISTINCT coalesce(t.segment_of, t.partition_key)) FILTER (WHERE t.failed_at IS NOT NULL) AS quarantined_partitions,
		       min(t.pending_since) FILTER (WHERE t.available > t.position AND t.failed_at IS NULL) AS oldest,
		       coalesce(sum(t.available) FILTER (WHERE t.segment_of IS NULL), 0)::bigint AS added_items,
		       coalesce(sum(t.rewound_items) FILTER (WHERE t.segment_of IS NULL), 0)::bigint AS rewound_items
		  FROM {{.Schema}}.tasks t
		 GROUP BY t.kind
	),
	w AS (
		SELECT wk.kind, count(*) AS workers
		  FROM {{.Schema}}.workers wk, p
		 WHERE wk.expires_at > p.now AND wk.stopped_at IS NULL
		 GROUP BY wk.kind
	),
	k AS (
		SELECT coalesce(cur.kind, w.kind) AS kind,
		       coalesce(cur.pending_items, 0) AS pending_items, coalesce(cur.pending_partitions, 0) AS pending_partitions,
		       coalesce(cur.pending_rows, 0) AS pending_rows,
		       coalesce(cur.quarantined_items, 0) AS quarantined_items,
		       coalesce(cur.quarantined_partitions, 0) AS quarantined_partitions,
		       cur.oldest, coalesce(cur.added_items, 0) AS added_items, coalesce(cur.rewound_items, 0) AS rewound_items,
		       coalesce(w.workers, 0)::integer AS workers
		  FROM cur FULL JOIN w ON w.kind = cur.kind
	)`

// backlogRecord writes a sample per kind whose newest is older than the
// gap (any worker may: the first one in a gap writes it) and prunes old
// samples.
const backlogRecord = `,
	ins AS (
		INSERT INTO {{.Schema}}.backlog_samples (kind, at, pending_items, quarantined_items, added_items, rewound_items, workers)
		SELECT k.kind, p.now, k.pending_items, k.quarantined_items, k.added_items, k.rewound_items, k.workers
		  FROM k, p
		 WHERE NOT EXISTS (SELECT 1 FROM {{.Schema}}.backlog_samples s
		                    WHERE s.kind = k.kind AND s.at > p.now - ?::bigint * interval '1 microsecond')
		ON CONFLICT DO NOTHING
		RETURNING 1
	),
	pruned AS (
		DELETE FROM {{.Schema}}.backlog_samples s USING p
		 WHERE s.at < p.now - ?::bigint * interval '1 microsecond'
		RETURNING 1
	)`

// backlogSelect reads, per kind, the reference sample (the one nearest
// to a window ago among those old enough) and the items processed since:
// added + rewound − growth of everything pending (quarantined included),
// which splits, segment clean-ups and quarantines leave unchanged.
const backlogSelect = `
	SELECT k.kind, p.now, k.pending_items, k.pending_partitions, k.pending_rows,
	       k.quarantined_items, k.quarantined_partitions, k.oldest, k.workers,
	       r.at,
	       coalesce((k.added_items - r.added_items) + (k.rewound_items - r.rewound_items)
	                - ((k.pending_items + k.quarantined_items) - (r.pending_items + r.quarantined_items)), 0),
	       coalesce((SELECT (sum(s.workers) + k.workers)::float8 / (count(*) + 1)
	                   FROM {{.Schema}}.backlog_samples s
	                  WHERE s.kind = k.kind AND s.at >= r.at AND s.at <= p.now), k.workers)
	  FROM k CROSS JOIN p
	  LEFT JOIN LATERAL (
	        SELECT s.at, s.pending_items, s.quarantined_items, s.added_items, s.rewound_items
	          FROM {{.Schema}}.backlog_samples s
	         WHERE s.kind = k.kind AND s.at <= p.now - ?::bigint * interval '1 microsecond'
	           AND s.at >= p.now - ?::bigint * interval '1 microsecond'
	         ORDER BY abs(extract(epoch FROM s.at - (p.now - ?::bigint * interval '1 microsecond'))), s.at DESC
	         LIMIT 1) r ON true`

// backlogSQL is the statement ReadBacklog runs, with or without the
// sample's write.
func backlogSQL(record bool) string {
	q := "WITH " + backlogTotals
	if record {
		q += backlogRecord
	}
	q += backlogSelect
	if record {
		q += "\n\t WHERE (SELECT count(*) FROM ins) >= 0 AND (SELECT count(*) FROM pruned) >= 0"
	}
	return q + "\n\t ORDER BY k.kind"
}

// ReadBacklog reads every kind's backlog totals from the task and worker
// tables of schemaName (empty: schema.Default) in one statement, and the
// reference sample for its rate; with p.Record it also writes the
// current totals as a sample when one is due. It reads the whole task
// table: run it on an interval of its own, never on the claim path.
func ReadBacklog(ctx context.Context, db bun.IDB, schemaName string, p BacklogParams) ([]BacklogRow, error) {
	// The reference is looked for no further back than twice the window.
	args := []any{p.Now}
	if p.Record {
		args = append(args, micros(p.SampleGap), micros(p.Keep))
	}
	args = append(args, micros(p.MinWindow), micros(2*p.Window), micros(p.Window))
	rows, err := db.QueryContext(ctx, schema.SQL(cmp.Or(schemaName, schema.Default), backlogSQL(p.Record)), args...)
	if err != nil {
		return nil, fmt.Errorf("reading the backlog: %w", err)
	}
	defer rows.Close()
	var out []BacklogRow
	for rows.Next() {
		var r BacklogRow
		var oldest, refAt sql.NullTime
		if err := rows.Scan(&r.Kind, &r.At, &r.PendingItems, &r.PendingPartitions, &r.PendingRows,
			&r.QuarantinedItems, &r.QuarantinedPartitions, &oldest, &r.Workers, &refAt,
			&r.Processed, &r.MeanWorkers); err != nil {
			return nil, fmt.Errorf("reading the backlog: %w", err)
		}
		r.OldestPending, r.RefAt = oldest.Time, refAt.Time
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the backlog: %w", err)
	}
	return out, nil
}

// BacklogHistory reads kind's stored samples taken after since, oldest
// first (at most one per sampling gap: a bounded read of the primary
// key).
func BacklogHistory(ctx context.Context, db bun.IDB, schemaName, kind string, since time.Time) ([]BacklogSample, error) {
	rows, err := db.QueryContext(ctx, schema.SQL(cmp.Or(schemaName, schema.Default), `
		SELECT at, pending_items, quarantined_items, workers
		  FROM {{.Schema}}.backlog_samples
		 WHERE kind = ? AND at > ?
		 ORDER BY at`), kind, since)
	if err != nil {
		return nil, fmt.Errorf("reading the backlog history of %s: %w", kind, err)
	}
	defer rows.Close()
	var out []BacklogSample
	for rows.Next() {
		var s BacklogSample
		if err := rows.Scan(&s.At, &s.PendingItems, &s.QuarantinedItems, &s.Workers); err != nil {
			return nil, fmt.Errorf("reading the backlog history of %s: %w", kind, err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the backlog history of %s: %w", kind, err)
	}
	return out, nil
}
