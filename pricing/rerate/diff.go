package rerate

import (
	"context"
	"fmt"
	"strconv"

	"github.com/uptrace/bun/dialect/pgdialect"
)

// previousSQL is, for every contract, the generation exported as its
// previous one: the last superseded generation whose rows are kept, or
// the current one for a contract never re-priced or whose previous
// generation was pruned.
const previousSQL = `SELECT c.contract_id, c.current_generation,
       coalesce((SELECT max(s.generation) FROM {{.Schema}}.generations s
                  WHERE s.contract_id = c.contract_id AND s.state = 'superseded'), c.current_generation) AS previous
  FROM {{.Schema}}.contracts c`

// PreviousSQL selects the previous generation's priced rows with the
// columns of export (contract_id, record_id, gross_minor, discount_minor,
// net_minor), ordered by contract and seq: each contract's view of the
// generation previousSQL names (priced_generation), read in place. Its
// table names use schema.Placeholder.
const PreviousSQL = `WITH prev AS (` + previousSQL + `)
SELECT v.contract_id, r.record_id, r.gross_minor, r.discount_minor, r.net_minor
  FROM prev v CROSS JOIN LATERAL {{.Schema}}.priced_generation(v.contract_id, v.previous) r
 ORDER BY v.contract_id COLLATE "C", r.seq`

// PreviewSQL selects, with PreviousSQL's columns and order, each
// contract's preview waiting for a decision (its view, priced_generation,
// as far as it is priced) or, for a contract without one, its current
// rows. Its table names use schema.Placeholder.
const PreviewSQL = `WITH v AS (
    SELECT c.contract_id,
           coalesce((SELECT g.generation FROM {{.Schema}}.generations g
                      WHERE g.contract_id = c.contract_id AND g.state = 'preview'), c.current_generation) AS gen
      FROM {{.Schema}}.contracts c)
SELECT v.contract_id, r.record_id, r.gross_minor, r.discount_minor, r.net_minor
  FROM v CROSS JOIN LATERAL {{.Schema}}.priced_generation(v.contract_id, v.gen) r
 ORDER BY v.contract_id COLLATE "C", r.seq`

// Change is one record whose priced row differs between a contract's
// previous and current generations: amounts changed, or a record priced
// in only one of them (Added: no old row; Removed: no new row, their
// amounts 0).
type Change struct {
	Contract                      string
	RecordID                      string
	Seq                           int64
	OldGross, OldDiscount, OldNet int64
	NewGross, NewDiscount, NewNet int64
	Added, Removed                bool
}

// Columns are c's fields as worker diff's CSV writes them, after contract
// and record id: old gross, discount and net (empty for a record added),
// new gross, discount and net (empty for a record removed).
func (c Change) Columns() []string {
	out := []string{c.Contract, c.RecordID, "", "", "", "", "", ""}
	if !c.Added {
		out[2], out[3], out[4] = strconv.FormatInt(c.OldGross, 10), strconv.FormatInt(c.OldDiscount, 10), strconv.FormatInt(c.OldNet, 10)
	}
	if !c.Removed {
		out[5], out[6], out[7] = strconv.FormatInt(c.NewGross, 10), strconv.FormatInt(c.NewDiscount, 10), strconv.FormatInt(c.NewNet, 10)
	}
	return out
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
	// from is the first seq at which the generations can differ minus
	// one: every generation after Previous prices only records after it.
	from int64
}

// diffTotalsSQL is, for each contract whose previous generation is kept,
// both generations' net totals and the lowest from_seq of the generations
// after the previous one.
const diffTotalsSQL = `WITH prev AS (` + previousSQL + `)
SELECT v.contract_id, v.previous, v.current_generation,
       (SELECT coalesce(sum(r.net_minor), 0) FROM {{.Schema}}.priced_generation(v.contract_id, v.previous) r),
       (SELECT coalesce(sum(r.net_minor), 0) FROM {{.Schema}}.priced_generation(v.contract_id, v.current_generation) r),
       (SELECT coalesce(min(g.from_seq), 0) FROM {{.Schema}}.generations g
         WHERE g.contract_id = v.contract_id AND g.generation > v.previous AND g.generation <= v.current_generation)
  FROM prev v
 WHERE v.previous < v.current_generation AND (coalesce(cardinality(?::text[]), 0) = 0 OR v.contract_id = ANY (?::text[]))
 ORDER BY v.contract_id COLLATE "C"`

// diffRowsSQL lists a contract's records priced differently by
// generations ?1 (old) and ?2 (new), or by one of them only, after seq ?3.
const diffRowsSQL = `SELECT coalesce(n.record_id, o.record_id), coalesce(n.seq, o.seq),
       coalesce(o.gross_minor, 0), coalesce(o.discount_minor, 0), coalesce(o.net_minor, 0),
       coalesce(n.gross_minor, 0), coalesce(n.discount_minor, 0), coalesce(n.net_minor, 0),
       o.seq IS NULL, n.seq IS NULL
  FROM (SELECT * FROM {{.Schema}}.priced_generation(?0, ?1) WHERE seq > ?3) o
  FULL JOIN (SELECT * FROM {{.Schema}}.priced_generation(?0, ?2) WHERE seq > ?3) n ON n.seq = o.seq
 WHERE o.seq IS NULL OR n.seq IS NULL
    OR (o.gross_minor, o.discount_minor, o.net_minor) IS DISTINCT FROM (n.gross_minor, n.discount_minor, n.net_minor)
 ORDER BY 2`

// Diff compares, for each re-priced contract whose previous generation is
// kept (those of contracts if it is not empty), its previous and current
// generations, and calls fn with each record whose priced row differs, was
// added or was removed, by contract and seq. It returns the contracts' net
// totals, both read from the generations' rows, so that each contract's
// changes (a missing row counting 0) sum exactly to the change in its
// total.
func (s *Store) Diff(ctx context.Context, contracts []string, fn func(Change) error) ([]ContractDiff, error) {
	return s.diff(ctx, diffTotalsSQL, contracts, fn)
}

func (s *Store) diff(ctx context.Context, totals string, contracts []string, fn func(Change) error) ([]ContractDiff, error) {
	out, err := s.readTotals(ctx, totals, contracts)
	if err != nil {
		return nil, err
	}
	for i := range out {
		if err := s.diffRows(ctx, &out[i], fn); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// previewTotalsSQL is, for each contract with a preview waiting, its
// current generation's and its preview's net totals, and the preview's
// from_seq.
const previewTotalsSQL = `SELECT g.contract_id, c.current_generation, g.generation,
       (SELECT coalesce(sum(r.net_minor), 0) FROM {{.Schema}}.priced_generation(g.contract_id, c.current_generation) r),
       (SELECT coalesce(sum(r.net_minor), 0) FROM {{.Schema}}.priced_generation(g.contract_id, g.generation) r),
       g.from_seq
  FROM {{.Schema}}.generations g JOIN {{.Schema}}.contracts c ON c.contract_id = g.contract_id
 WHERE g.state = 'preview' AND (coalesce(cardinality(?::text[]), 0) = 0 OR g.contract_id = ANY (?::text[]))
 ORDER BY g.contract_id COLLATE "C"`

// DiffPreview is Diff between each contract's current generation
// (ContractDiff.Previous, the old columns) and its preview waiting for a
// decision (ContractDiff.Current, the new columns), for the contracts with
// a preview (of contracts if it is not empty). A preview still being
// priced is compared as far as it got: the records it has not priced yet
// show their current rows in it, unchanged.
func (s *Store) DiffPreview(ctx context.Context, contracts []string, fn func(Change) error) ([]ContractDiff, error) {
	return s.diff(ctx, previewTotalsSQL, contracts, fn)
}

// readTotals reads the generations to compare and their totals with
// query (diffTotalsSQL or previewTotalsSQL).
func (s *Store) readTotals(ctx context.Context, query string, contracts []string) ([]ContractDiff, error) {
	rows, err := s.t.DB.QueryContext(ctx, s.t.SQL(query), pgdialect.Array(contracts), pgdialect.Array(contracts))
	if err != nil {
		return nil, fmt.Errorf("comparing generations: %w", err)
	}
	defer rows.Close()
	var out []ContractDiff
	for rows.Next() {
		var d ContractDiff
		if err := rows.Scan(&d.Contract, &d.Previous, &d.Current, &d.OldNetTotal, &d.NewNetTotal, &d.from); err != nil {
			return nil, fmt.Errorf("comparing generations: %w", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("comparing generations: %w", err)
	}
	return out, nil
}

func (s *Store) diffRows(ctx context.Context, d *ContractDiff, fn func(Change) error) error {
	rows, err := s.t.DB.QueryContext(ctx, s.t.SQL(diffRowsSQL), d.Contract, d.Previous, d.Current, d.from)
	if err != nil {
		return fmt.Errorf("comparing generations of contract %s: %w", d.Contract, err)
	}
	defer rows.Close()
	for rows.Next() {
		c := Change{Contract: d.Contract}
		if err := rows.Scan(&c.RecordID, &c.Seq, &c.OldGross, &c.OldDiscount, &c.OldNet, &c.NewGross, &c.NewDiscount, &c.NewNet,
			&c.Added, &c.Removed); err != nil {
			return fmt.Errorf("comparing generations of contract %s: %w", d.Contract, err)
		}
		d.ChangedRecords++
		if err := fn(c); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("comparing generations of contract %s: %w", d.Contract, err)
	}
	return nil
}
