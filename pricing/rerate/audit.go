package rerate

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/uptrace/bun/dialect/pgdialect"
)

// Generation is one generation of a re-priced contract, as List reports
// it.
type Generation struct {
	Contract   string     `json:"contract_id"`
	Generation int64      `json:"generation"`
	State      string     `json:"state"` // pricing, current, superseded or abandoned
	FromSeq    int64      `json:"from_seq"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	StartedBy  string     `json:"started_by"`
	Reason     string     `json:"reason"`
	// Records and NetTotal are the generation's priced records and the
	// sum of their nets: frozen when it stopped being in progress, for
	// the current one what priced holds now, and for one being priced
	// what it has priced so far (with the records it shares).
	Records  int64 `json:"records"`
	NetTotal int64 `json:"net_total"`
}

// List lists the generations of the re-priced contracts (all of them if
// contracts is empty), by contract and generation. Contracts never
// re-priced have no generation rows and are not listed.
func (s *Store) List(ctx context.Context, contracts []string) ([]Generation, error) {
	rows, err := s.t.DB.QueryContext(ctx, s.t.SQL(`
SELECT g.contract_id, g.generation, g.state, g.from_seq, g.started_at, g.finished_at, g.started_by, g.reason,
       CASE g.state
         WHEN 'current' THEN (SELECT count(*) FROM {{.Schema}}.priced p WHERE p.contract_id = g.contract_id)
         WHEN 'pricing' THEN (SELECT count(*) FROM {{.Schema}}.priced p WHERE p.contract_id = g.contract_id AND p.seq <= g.from_seq)
                           + (SELECT count(*) FROM {{.Schema}}.priced_pending p WHERE p.contract_id = g.contract_id AND p.generation = g.generation)
         ELSE coalesce(g.records, 0) END,
       CASE g.state
         WHEN 'current' THEN (SELECT coalesce(sum(net_minor), 0) FROM {{.Schema}}.priced p WHERE p.contract_id = g.contract_id)
         WHEN 'pricing' THEN (SELECT coalesce(sum(net_minor), 0) FROM {{.Schema}}.priced p WHERE p.contract_id = g.contract_id AND p.seq <= g.from_seq)
                           + (SELECT coalesce(sum(net_minor), 0) FROM {{.Schema}}.priced_pending p WHERE p.contract_id = g.contract_id AND p.generation = g.generation)
         ELSE coalesce(g.net_total, 0) END
  FROM {{.Schema}}.generations g
 WHERE coalesce(cardinality(?::text[]), 0) = 0 OR g.contract_id = ANY (?::text[])
 ORDER BY g.contract_id, g.generation`), pgdialect.Array(contracts), pgdialect.Array(contracts))
	if err != nil {
		return nil, fmt.Errorf("listing generations: %w", err)
	}
	defer rows.Close()
	var out []Generation
	for rows.Next() {
		var g Generation
		var finished sql.NullTime
		if err := rows.Scan(&g.Contract, &g.Generation, &g.State, &g.FromSeq, &g.StartedAt, &finished, &g.StartedBy, &g.Reason,
			&g.Records, &g.NetTotal); err != nil {
			return nil, fmt.Errorf("listing generations: %w", err)
		}
		if finished.Valid {
			t := finished.Time
			g.FinishedAt = &t
		}
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing generations: %w", err)
	}
	return out, nil
}

// previousSQL is, for every contract re-priced whose previous generation
// is kept, that generation (the last superseded one) and the from_seq of
// the current generation that replaced it.
const previousSQL = `SELECT c.contract_id, c.current_generation, cur.from_seq,
       (SELECT max(s.generation) FROM {{.Schema}}.generations s
         WHERE s.contract_id = c.contract_id AND s.state = 'superseded') AS previous
  FROM {{.Schema}}.contracts c
  JOIN {{.Schema}}.generations cur ON cur.contract_id = c.contract_id AND cur.generation = c.current_generation
 WHERE c.current_generation > 1`

// PreviousSQL selects the previous generation's priced rows with the
// columns of export (contract_id, record_id, gross_minor, discount_minor,
// net_minor), ordered by contract and seq: for a re-priced contract, the
// rows its current generation shares with it (priced, up to the current
// generation's from_seq) and the ones it replaced (priced_superseded); for
// a contract never re-priced, or whose previous generation was pruned,
// its current rows. Its table names use schema.Placeholder.
const PreviousSQL = `WITH prev AS (` + previousSQL + `)
SELECT contract_id, record_id, gross_minor, discount_minor, net_minor FROM (
    SELECT p.contract_id, p.seq, p.record_id, p.gross_minor, p.discount_minor, p.net_minor
      FROM {{.Schema}}.priced p LEFT JOIN prev v ON v.contract_id = p.contract_id AND v.previous IS NOT NULL
     WHERE v.contract_id IS NULL OR p.seq <= v.from_seq
    UNION ALL
    SELECT s.contract_id, s.seq, s.record_id, s.gross_minor, s.discount_minor, s.net_minor
      FROM {{.Schema}}.priced_superseded s JOIN prev v ON v.contract_id = s.contract_id AND s.generation = v.previous
) u
ORDER BY contract_id COLLATE "C", seq`

// Change is one record whose priced amounts differ between a contract's
// previous and current generations.
type Change struct {
	Contract                      string
	RecordID                      string
	Seq                           int64
	OldGross, OldDiscount, OldNet int64
	NewGross, NewDiscount, NewNet int64
}

// ContractDiff is one re-priced contract's previous and current net
// totals, and its changed records.
type ContractDiff struct {
	Contract       string `json:"contract_id"`
	Previous       int64  `json:"previous_generation"`
	Current        int64  `json:"current_generation"`
	OldNetTotal    int64  `json:"old_net_total"`
	NewNetTotal    int64  `json:"new_net_total"`
	ChangedRecords int64  `json:"changed_records"`
}

// Diff compares, for each re-priced contract whose previous generation is
// kept (those of contracts if it is not empty), the records its previous
// and current generations both priced, and calls fn with each whose gross,
// discount or net differs, by contract and seq. It returns the contracts'
// net totals: the previous generation's as frozen when it was superseded,
// the current one's as priced now.
func (s *Store) Diff(ctx context.Context, contracts []string, fn func(Change) error) ([]ContractDiff, error) {
	rows, err := s.t.DB.QueryContext(ctx, s.t.SQL(`
WITH prev AS (`+previousSQL+`)
SELECT v.contract_id, v.previous, v.current_generation, g.net_total,
       (SELECT coalesce(sum(p.net_minor), 0) FROM {{.Schema}}.priced p WHERE p.contract_id = v.contract_id)
  FROM prev v JOIN {{.Schema}}.generations g ON g.contract_id = v.contract_id AND g.generation = v.previous
 WHERE v.previous IS NOT NULL AND (coalesce(cardinality(?::text[]), 0) = 0 OR v.contract_id = ANY (?::text[]))
 ORDER BY v.contract_id COLLATE "C"`), pgdialect.Array(contracts), pgdialect.Array(contracts))
	if err != nil {
		return nil, fmt.Errorf("comparing generations: %w", err)
	}
	var out []ContractDiff
	for rows.Next() {
		var d ContractDiff
		var old sql.NullInt64
		if err := rows.Scan(&d.Contract, &d.Previous, &d.Current, &old, &d.NewNetTotal); err != nil {
			rows.Close()
			return nil, fmt.Errorf("comparing generations: %w", err)
		}
		d.OldNetTotal = old.Int64
		out = append(out, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("comparing generations: %w", err)
	}
	for i := range out {
		d := &out[i]
		rows, err := s.t.DB.QueryContext(ctx, s.t.SQL(`
SELECT s.record_id, s.seq, s.gross_minor, s.discount_minor, s.net_minor, p.gross_minor, p.discount_minor, p.net_minor
  FROM {{.Schema}}.priced_superseded s
  JOIN {{.Schema}}.priced p ON p.contract_id = s.contract_id AND p.seq = s.seq
 WHERE s.contract_id = ? AND s.generation = ?
   AND (s.gross_minor, s.discount_minor, s.net_minor) IS DISTINCT FROM (p.gross_minor, p.discount_minor, p.net_minor)
 ORDER BY s.seq`), d.Contract, d.Previous)
		if err != nil {
			return nil, fmt.Errorf("comparing generations of contract %s: %w", d.Contract, err)
		}
		for rows.Next() {
			c := Change{Contract: d.Contract}
			if err := rows.Scan(&c.RecordID, &c.Seq, &c.OldGross, &c.OldDiscount, &c.OldNet, &c.NewGross, &c.NewDiscount, &c.NewNet); err != nil {
				rows.Close()
				return nil, fmt.Errorf("comparing generations of contract %s: %w", d.Contract, err)
			}
			d.ChangedRecords++
			if err := fn(c); err != nil {
				rows.Close()
				return nil, err
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("comparing generations of contract %s: %w", d.Contract, err)
		}
	}
	return out, nil
}

// Pruned is what Prune removed.
type Pruned struct {
	Generations int64 `json:"generations"` // superseded and abandoned generation rows
	Rows        int64 `json:"rows"`        // priced rows of superseded generations
}

// Prune removes the superseded and abandoned generations that stopped
// being current (or in progress) more than olderThan ago, by the database
// clock: their rows and their priced rows in priced_superseded. Current
// generations and generations being priced are kept, and so are the
// amendments (the audit trail of amounts). A contract whose previous
// generation is pruned exports its current rows as its previous ones.
func (s *Store) Prune(ctx context.Context, olderThan time.Duration) (Pruned, error) {
	if olderThan < 0 {
		return Pruned{}, fmt.Errorf("pruning generations: older than %s, want ≥ 0", olderThan)
	}
	var p Pruned
	err := s.t.DB.QueryRowContext(ctx, s.t.SQL(`
WITH old AS (
    DELETE FROM {{.Schema}}.generations
     WHERE state IN ('superseded', 'abandoned')
       AND coalesce(superseded_at, finished_at) < now() - make_interval(secs => ?)
    RETURNING contract_id, generation
), gone AS (
    DELETE FROM {{.Schema}}.priced_superseded s USING old o
     WHERE s.contract_id = o.contract_id AND s.generation = o.generation
    RETURNING 1
)
SELECT (SELECT count(*) FROM old), (SELECT count(*) FROM gone)`), olderThan.Seconds()).Scan(&p.Generations, &p.Rows)
	if err != nil {
		return p, fmt.Errorf("pruning generations older than %s: %w", olderThan, err)
	}
	return p, nil
}
