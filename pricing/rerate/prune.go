package rerate

import (
	"context"
	"fmt"
	"time"
)

// PruneBatchRowsDefault is how many priced rows of a pruned generation
// Prune examines per transaction.
const PruneBatchRowsDefault = 10_000

// Pruned is what Prune removed.
type Pruned struct {
	Generations int64 `json:"generations"` // superseded and abandoned generations marked pruned
	Rows        int64 `json:"rows"`        // priced rows deleted
}

// markPrunedSQL marks the superseded and abandoned generations that
// stopped being current (or in progress) more than ?0 seconds ago pruned,
// freezing a superseded one's totals from its rows first (an abandoned
// one's were frozen when it was abandoned). The generation rows stay, for
// the audit trail.
const markPrunedSQL = `WITH old AS (
    SELECT g.contract_id, g.generation, g.state
      FROM {{.Schema}}.generations g
     WHERE g.state IN ('superseded', 'abandoned')
       AND coalesce(g.superseded_at, g.finished_at) < now() - make_interval(secs => ?0)
       FOR UPDATE
), totals AS (
    SELECT o.contract_id, o.generation, t.*
      FROM old o CROSS JOIN LATERAL (
        SELECT count(*) AS n, coalesce(sum(r.gross_minor), 0) AS gross, coalesce(sum(r.discount_minor), 0) AS discount,
               coalesce(sum(r.net_minor), 0) AS net
          FROM {{.Schema}}.priced_generation(o.contract_id, o.generation) r) t
     WHERE o.state = 'superseded'
), marked AS (
    UPDATE {{.Schema}}.generations g
       SET state = 'pruned', pruned_at = now(),
           records = coalesce(t.n, g.records), gross_total = coalesce(t.gross, g.gross_total),
           discount_total = coalesce(t.discount, g.discount_total), net_total = coalesce(t.net, g.net_total)
      FROM old o LEFT JOIN totals t ON t.contract_id = o.contract_id AND t.generation = o.generation
     WHERE g.contract_id = o.contract_id AND g.generation = o.generation
    RETURNING 1
)
SELECT count(*) FROM marked`

// prunableSQL lists the pruned generations and, for each, the oldest
// generation kept at or after it (current, being priced or superseded):
// a pruned generation's row is needed only while it is that generation's
// row for its seq, that is while no row of a generation between them
// replaces it.
const prunableSQL = `SELECT g.contract_id, g.generation,
       (SELECT min(k.generation) FROM {{.Schema}}.generations k
         WHERE k.contract_id = g.contract_id AND k.generation > g.generation
           AND k.state IN ('pricing', 'current', 'superseded'))
  FROM {{.Schema}}.generations g
 WHERE g.state = 'pruned'
 ORDER BY g.contract_id, g.generation`

// pruneRowsSQL deletes, of generation ?1 of contract ?0, those among its
// next ?3 rows after seq ?2 that a row of a generation in (?1, ?4]
// replaces. It returns the last seq examined (0 when none was) and the
// rows deleted.
const pruneRowsSQL = `WITH cand AS (
    SELECT r.seq FROM {{.Schema}}.priced_rows r
     WHERE r.contract_id = ?0 AND r.generation = ?1 AND r.seq > ?2
     ORDER BY r.seq LIMIT ?3
), del AS (
    DELETE FROM {{.Schema}}.priced_rows d USING cand c
     WHERE d.contract_id = ?0 AND d.generation = ?1 AND d.seq = c.seq
       AND EXISTS (SELECT 1 FROM {{.Schema}}.priced_rows n
                    WHERE n.contract_id = ?0 AND n.seq = c.seq AND n.generation > ?1 AND n.generation <= ?4)
    RETURNING 1
)
SELECT coalesce((SELECT max(seq) FROM cand), 0), (SELECT count(*) FROM del)`

// Prune removes the superseded and abandoned generations that stopped
// being current (or in progress) more than olderThan ago, by the database
// clock. Their generation rows stay, state pruned, with their totals
// frozen; their priced rows go, in transactions of at most
// PruneBatchRowsDefault rows each, except the ones a kept generation still
// shows (the prefix it shares). Current generations and generations being
// priced are kept, and so are the amendments (the audit trail of
// amounts). A contract whose previous generation is pruned exports its
// current rows as its previous ones. Prune resumes the row deletion of
// generations an interrupted Prune marked.
func (s *Store) Prune(ctx context.Context, olderThan time.Duration) (Pruned, error) {
	if olderThan < 0 {
		return Pruned{}, fmt.Errorf("pruning generations: older than %s, want ≥ 0", olderThan)
	}
	var p Pruned
	if err := s.t.DB.QueryRowContext(ctx, s.t.SQL(markPrunedSQL), olderThan.Seconds()).Scan(&p.Generations); err != nil {
		return p, fmt.Errorf("pruning generations older than %s: %w", olderThan, err)
	}
	type gen struct {
		contract  string
		gen, kept int64
	}
	var gens []gen
	rows, err := s.t.DB.QueryContext(ctx, s.t.SQL(prunableSQL))
	if err != nil {
		return p, fmt.Errorf("listing pruned generations: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var g gen
		var kept *int64
		if err := rows.Scan(&g.contract, &g.gen, &kept); err != nil {
			return p, fmt.Errorf("listing pruned generations: %w", err)
		}
		if kept != nil {
			g.kept = *kept
			gens = append(gens, g)
		}
	}
	if err := rows.Err(); err != nil {
		return p, fmt.Errorf("listing pruned generations: %w", err)
	}
	rows.Close()
	for _, g := range gens {
		for after := int64(0); ; {
			var last, n int64
			if err := s.t.DB.QueryRowContext(ctx, s.t.SQL(pruneRowsSQL), g.contract, g.gen, after, PruneBatchRowsDefault, g.kept).
				Scan(&last, &n); err != nil {
				return p, fmt.Errorf("pruning the rows of generation %d of contract %s after seq %d: %w", g.gen, g.contract, after, err)
			}
			p.Rows += n
			if last == 0 {
				break
			}
			after = last
		}
	}
	return p, nil
}

// prunePlanSQL counts what Prune(?0 seconds) would mark and delete: the
// generations it would mark, and the rows of those and of generations
// already pruned that a row of a generation up to the oldest one kept
// after theirs replaces.
const prunePlanSQL = `WITH old AS (
    SELECT g.contract_id, g.generation
      FROM {{.Schema}}.generations g
     WHERE g.state IN ('superseded', 'abandoned')
       AND coalesce(g.superseded_at, g.finished_at) < now() - make_interval(secs => ?0)
), gone AS (
    SELECT g.contract_id, g.generation,
           (SELECT min(k.generation) FROM {{.Schema}}.generations k
             WHERE k.contract_id = g.contract_id AND k.generation > g.generation
               AND k.state IN ('pricing', 'current', 'superseded')
               AND NOT EXISTS (SELECT 1 FROM old o WHERE o.contract_id = k.contract_id AND o.generation = k.generation)) AS kept
      FROM {{.Schema}}.generations g
     WHERE g.state = 'pruned' OR EXISTS (SELECT 1 FROM old o WHERE o.contract_id = g.contract_id AND o.generation = g.generation)
)
SELECT (SELECT count(*) FROM old),
       (SELECT count(*) FROM gone x JOIN {{.Schema}}.priced_rows r ON r.contract_id = x.contract_id AND r.generation = x.generation
         WHERE EXISTS (SELECT 1 FROM {{.Schema}}.priced_rows n
                        WHERE n.contract_id = r.contract_id AND n.seq = r.seq AND n.generation > r.generation AND n.generation <= x.kept))`

// PrunePlan reports what Prune(ctx, olderThan) would remove now, and
// changes nothing ("worker prune --generations-older-than --dry-run").
func (s *Store) PrunePlan(ctx context.Context, olderThan time.Duration) (Pruned, error) {
	if olderThan < 0 {
		return Pruned{}, fmt.Errorf("planning the pruning of generations: older than %s, want ≥ 0", olderThan)
	}
	var p Pruned
	if err := s.t.DB.QueryRowContext(ctx, s.t.SQL(prunePlanSQL), olderThan.Seconds()).Scan(&p.Generations, &p.Rows); err != nil {
		return p, fmt.Errorf("planning the pruning of generations older than %s: %w", olderThan, err)
	}
	return p, nil
}
