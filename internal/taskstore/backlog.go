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

// BacklogParams says how ReadBacklog reads the task table's figures.
type BacklogParams struct {
	// Now is the time the figures are for; nil is the database clock
	// (tests move it to back-dated fixtures).
	Now *time.Time
	// Window is how far back the reference sample for the rate is looked
	// for: the sample nearest to Window before the figures among those at
	// least MinWindow and at most 2×Window older than them.
	Window, MinWindow time.Duration
	// Record publishes through the samples table: when some kind has a
	// sample younger than SampleGap, the figures are the newest samples
	// (another reader scanned moments ago) and the task table is not
	// read; otherwise they are computed and stored as samples, and
	// samples older than Keep are deleted. Without Record the figures
	// are always computed and nothing is written (a read-only role can
	// run it).
	Record          bool
	SampleGap, Keep time.Duration
}

// BacklogRow is one kind's figures as ReadBacklog read them.
type BacklogRow struct {
	Kind string
	// At is the time the figures are for: Params.Now or the database
	// clock, or a fresh sample's time when they come from it.
	At time.Time
	// PendingItems is available − position summed over the kind's task
	// rows (partitions and segments) that are neither quarantined nor
	// paused;
	// PendingPartitions counts the partitions (a partition and its
	// segments once) with such a row with pending items.
	PendingItems, PendingPartitions int64
	// QuarantinedItems and QuarantinedPartitions are the same over
	// quarantined rows (failed_at set).
	QuarantinedItems, QuarantinedPartitions int64
	// PausedItems is available − position over paused rows (a paused
	// partition, its segments, or any row of a paused kind) that are not
	// quarantined: not in PendingItems. PausedPartitions counts the
	// paused partitions, with pending work or not.
	PausedItems, PausedPartitions int64
	// OldestPending is the earliest pending_since of a pending row that is
	// not quarantined; zero when there is none.
	OldestPending time.Time
	Workers       int // live workers of the kind (registration not expired, not stopped)
	// RefAt is the reference sample's time (zero when none qualifies),
	// Processed the items processed from it to At and MeanWorkers the
	// mean live-worker count of the samples from it to At, At's included.
	RefAt       time.Time
	Processed   int64
	MeanWorkers float64
	// FromSample says the figures are a stored sample's, not computed by
	// this call.
	FromSample bool
}

// BacklogSample is one stored sample of a kind's figures.
type BacklogSample struct {
	At                             time.Time
	PendingItems, QuarantinedItems int64
	Workers                        int
}

// backlogScan computes each kind's figures in one pass over the task
// table (a sequential scan: nothing that checkpoints change is indexed)
// and the live workers in one over the workers table, unless fresh has a
// time (the scans are then skipped as a whole).
const backlogScan = `
	cur AS (
		SELECT t.kind,
		       coalesce(sum(t.available - t.position) FILTER (WHERE t.failed_at IS NULL AND NOT t.paused), 0)::bigint AS pending_items,
		       count(DISTINCT coalesce(t.segment_of, t.partition_key))
		             FILTER (WHERE t.available > t.position AND t.failed_at IS NULL AND NOT t.paused) AS pending_partitions,
		       coalesce(sum(t.available - t.position) FILTER (WHERE t.failed_at IS NOT NULL), 0)::bigint AS quarantined_items,
		       count(DISTINCT coalesce(t.segment_of, t.partition_key)) FILTER (WHERE t.failed_at IS NOT NULL) AS quarantined_partitions,
		       min(t.pending_since) FILTER (WHERE t.available > t.position AND t.failed_at IS NULL AND NOT t.paused) AS oldest,
		       coalesce(sum(t.available) FILTER (WHERE t.segment_of IS NULL), 0)::bigint AS added_items,
		       coalesce(sum(t.rewound_items) FILTER (WHERE t.segment_of IS NULL), 0)::bigint AS rewound_items,
		       coalesce(sum(t.available - t.position) FILTER (WHERE t.failed_at IS NULL AND t.paused), 0)::bigint AS paused_items,
		       count(DISTINCT coalesce(t.segment_of, t.partition_key)) FILTER (WHERE t.paused) AS paused_partitions
		  FROM (SELECT t.*,
		               -- Hashed subplans over the few pauses: one probe per row.
		               (t.kind, '') IN (SELECT kind, partition_key FROM {{.Schema}}.pauses)
		               OR (t.kind, coalesce(t.segment_of, t.partition_key)) IN (SELECT kind, partition_key FROM {{.Schema}}.pauses) AS paused
		          FROM {{.Schema}}.tasks t) t
		 WHERE (SELECT at FROM fresh) IS NULL
		 GROUP BY t.kind
	),
	w AS (
		SELECT wk.kind, count(*) AS workers
		  FROM {{.Schema}}.workers wk, p
		 WHERE wk.expires_at > p.now AND wk.stopped_at IS NULL AND (SELECT at FROM fresh) IS NULL
		 GROUP BY wk.kind
	),
	scan AS (
		SELECT coalesce(cur.kind, w.kind) AS kind, p.now AS at,
		       coalesce(cur.pending_items, 0) AS pending_items, coalesce(cur.pending_partitions, 0) AS pending_partitions,
		       coalesce(cur.quarantined_items, 0) AS quarantined_items,
		       coalesce(cur.quarantined_partitions, 0) AS quarantined_partitions,
		       cur.oldest, coalesce(cur.added_items, 0) AS added_items, coalesce(cur.rewound_items, 0) AS rewound_items,
		       coalesce(w.workers, 0)::integer AS workers,
		       coalesce(cur.paused_items, 0) AS paused_items, coalesce(cur.paused_partitions, 0) AS paused_partitions
		  FROM cur FULL JOIN w ON w.kind = cur.kind CROSS JOIN p
	)`

// backlogRecord stores the scan's figures (none when a fresh sample was
// found) and prunes old samples.
const backlogRecord = `,
	ins AS (
		INSERT INTO {{.Schema}}.backlog_samples (kind, at, pending_items, pending_partitions, quarantined_items,
		       quarantined_partitions, oldest_pending, added_items, rewound_items, workers, paused_items, paused_partitions)
		SELECT kind, at, pending_items, pending_partitions, quarantined_items, quarantined_partitions, oldest,
		       added_items, rewound_items, workers, paused_items, paused_partitions
		  FROM scan
		ON CONFLICT DO NOTHING
		RETURNING 1
	),
	pruned AS (
		DELETE FROM {{.Schema}}.backlog_samples s USING p
		 WHERE s.at < p.now - ?::bigint * interval '1 microsecond' AND (SELECT at FROM fresh) IS NULL
		RETURNING 1
	)`

// backlogSelect reads, per kind, the reference sample (the one nearest
// to a window before the figures among those old enough) and the items
// processed since: added + rewound − growth of everything pending
// (quarantined included), which splits, segment clean-ups and
// quarantines leave unchanged.
const backlogSelect = `,
	k AS (
		SELECT *, false AS from_sample FROM scan
		UNION ALL
		SELECT s.kind, s.at, s.pending_items, s.pending_partitions, s.quarantined_items, s.quarantined_partitions,
		       s.oldest_pending, s.added_items, s.rewound_items, s.workers, s.paused_items, s.paused_partitions, true
		  FROM {{.Schema}}.backlog_samples s
		 WHERE s.at = (SELECT at FROM fresh)
	)
	SELECT k.kind, k.at, k.pending_items, k.pending_partitions,
	       k.quarantined_items, k.quarantined_partitions, k.oldest, k.workers,
	       r.at,
	       coalesce((k.added_items - r.added_items) + (k.rewound_items - r.rewound_items)
	                - ((k.pending_items + k.quarantined_items + k.paused_items)
	                   - (r.pending_items + r.quarantined_items + r.paused_items)), 0),
	       coalesce((SELECT (sum(s.workers) + k.workers)::float8 / (count(*) + 1)
	                   FROM {{.Schema}}.backlog_samples s
	                  WHERE s.kind = k.kind AND s.at >= r.at AND s.at < k.at), k.workers),
	       k.from_sample, k.paused_items, k.paused_partitions
	  FROM k
	  LEFT JOIN LATERAL (
	        SELECT s.at, s.pending_items, s.quarantined_items, s.added_items, s.rewound_items, s.paused_items
	          FROM {{.Schema}}.backlog_samples s
	         WHERE s.kind = k.kind AND s.at <= k.at - ?::bigint * interval '1 microsecond'
	           AND s.at >= k.at - ?::bigint * interval '1 microsecond'
	         ORDER BY abs(extract(epoch FROM s.at - (k.at - ?::bigint * interval '1 microsecond'))), s.at DESC
	         LIMIT 1) r ON true`

// backlogSQL is the statement ReadBacklog runs and its arguments.
func backlogSQL(p BacklogParams) (string, []any) {
	q := "WITH p AS (SELECT coalesce(?::timestamptz, now()) AS now),\n"
	args := []any{p.Now}
	if p.Record {
		q += `	fresh AS (
		SELECT max(s.at) AS at FROM {{.Schema}}.backlog_samples s, p
		 WHERE s.at > p.now - ?::bigint * interval '1 microsecond' AND s.at <= p.now
	),`
		args = append(args, micros(p.SampleGap))
	} else {
		q += "	fresh AS (SELECT NULL::timestamptz AS at),"
	}
	q += backlogScan
	if p.Record {
		q += backlogRecord
		args = append(args, micros(p.Keep))
	}
	q += backlogSelect
	// The reference is looked for no further back than twice the window.
	args = append(args, micros(p.MinWindow), micros(2*p.Window), micros(p.Window))
	if p.Record {
		q += "\n\t WHERE (SELECT count(*) FROM ins) >= 0 AND (SELECT count(*) FROM pruned) >= 0"
	}
	return q + "\n\t ORDER BY k.kind", args
}

// ReadBacklog reads every kind's backlog figures from the task and worker
// tables of schemaName (empty: schema.Default) in one statement, or, with
// p.Record, from a sample younger than p.SampleGap if there is one (and
// otherwise stores what it read as samples), with the reference sample of
// the rate. Computing them reads the whole task table: run it on an
// interval of its own, never on the claim path.
func ReadBacklog(ctx context.Context, db bun.IDB, schemaName string, p BacklogParams) ([]BacklogRow, error) {
	q, args := backlogSQL(p)
	rows, err := db.QueryContext(ctx, schema.SQL(cmp.Or(schemaName, schema.Default), q), args...)
	if err != nil {
		return nil, fmt.Errorf("reading the backlog: %w", err)
	}
	defer rows.Close()
	var out []BacklogRow
	for rows.Next() {
		var r BacklogRow
		var oldest, refAt sql.NullTime
		if err := rows.Scan(&r.Kind, &r.At, &r.PendingItems, &r.PendingPartitions,
			&r.QuarantinedItems, &r.QuarantinedPartitions, &oldest, &r.Workers, &refAt,
			&r.Processed, &r.MeanWorkers, &r.FromSample, &r.PausedItems, &r.PausedPartitions); err != nil {
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
