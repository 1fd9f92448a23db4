package taskstore

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/batonhq/baton/internal/notify"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/batonhq/baton/partition"
)

// Segment is one segment split off a partition: its items (Start, End],
// processed from State, the checkpoint state a segment starting at Start
// carries.
type Segment struct {
	Start, End int64
	State      json.RawMessage
}

// Split writes segs, segments of l's partition under generation, as task
// rows of their own, in tx, the partition's fenced batch (whose checkpoint
// moves past them in the same transaction): unowned, claimable at once,
// kind and generation the partition's. It deletes the partition's
// finished segments that nobody holds (rows another transaction has
// locked are left for a later split), records a "split" event and
// notifies the kind's workers at commit. Segment keys are
// partition.SegmentKey(l.Key, start); they are inserted in key order, the
// order every multi-row locker follows, after the deletion (the insert
// reads its count), so a finished segment deleted here never clashes with
// a new one at the same start.
func (s *Store) Split(ctx context.Context, tx bun.Tx, l partition.Lease, generation int64, segs []Segment) error {
	if len(segs) == 0 {
		return nil
	}
	keys := make([]string, len(segs))
	starts := make([]int64, len(segs))
	ends := make([]int64, len(segs))
	states := make([]string, len(segs))
	for i, g := range segs {
		keys[i], starts[i], ends[i] = partition.SegmentKey(l.Key, g.Start), g.Start, g.End
		states[i] = "{}"
		if len(g.State) > 0 {
			states[i] = string(g.State)
		}
	}
	detail := fmt.Sprintf("%d segments of items %d to %d", len(segs), segs[0].Start+1, segs[len(segs)-1].End)
	var n int
	err := tx.QueryRowContext(ctx, s.sql(`
		WITH done AS (
			SELECT t.kind, t.partition_key FROM {{.Schema}}.tasks t
			WHERE t.kind = ? AND t.segment_of = ? AND t.owner IS NULL AND t.position >= t.available
			ORDER BY t.partition_key
			FOR UPDATE OF t SKIP LOCKED
		), gone AS (
			DELETE FROM {{.Schema}}.tasks t USING done
			WHERE t.kind = done.kind AND t.partition_key = done.partition_key
			RETURNING 1
		), ins AS (
			INSERT INTO {{.Schema}}.tasks (kind, partition_key, segment_of, generation, position, available, checkpoint)
			SELECT ?, w.key, ?, ?, w.st, w.e, w.state::jsonb
			FROM unnest(?::text[], ?::bigint[], ?::bigint[], ?::text[]) AS w(key, st, e, state)
			WHERE (SELECT count(*) FROM gone) >= 0
			ORDER BY w.key COLLATE "C"
			RETURNING 1
		), ev AS (
			INSERT INTO {{.Schema}}.events (task_kind, partition_key, kind, version, position, detail)
			VALUES (?, ?, ?, ?, ?, ?)
		), n AS (
			SELECT pg_notify(?, ? || ' ' || (extract(epoch FROM clock_timestamp()) * 1000000)::bigint)
		)
		SELECT (SELECT count(*) FROM ins) + 0 * (SELECT count(*) FROM n)`),
		s.kind, l.Key,
		s.kind, l.Key, generation,
		pgdialect.Array(keys), pgdialect.Array(starts), pgdialect.Array(ends), pgdialect.Array(states),
		s.kind, l.Key, string(partition.EventSplit), l.Version, segs[0].Start, detail,
		notify.Channel, notify.Payload(notify.Work, s.kind)).Scan(&n)
	if err != nil {
		return fmt.Errorf("splitting %s into %d segments: %w", l, len(segs), err)
	}
	if n != len(segs) {
		return fmt.Errorf("splitting %s: %d of %d segments written", l, n, len(segs))
	}
	return nil
}

// SegmentsHeldByOthers sums the pending items of the segments of
// partitions that owners other than self hold under a lease that has not
// run out: as of their last commits, so fresher than the workers'
// heartbeats. A worker sharing a split partition's unowned segments with
// the others reckons its part against it (distributor.withinBacklogShare).
func (s *Store) SegmentsHeldByOthers(ctx context.Context, self string, partitions []string) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, s.sql(`
		SELECT coalesce(sum(greatest(available - position, 0)), 0)::bigint FROM {{.Schema}}.tasks
		WHERE kind = ? AND segment_of = ANY(?::text[]) AND owner <> ? AND lease_expires_at > now()`),
		s.kind, pgdialect.Array(partitions), self).Scan(&n); err != nil {
		return 0, fmt.Errorf("reading the pending items of segments others hold: %w", err)
	}
	return n, nil
}
