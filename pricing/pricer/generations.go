package pricer

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/distributor"
)

// Generations. A contract's priced output belongs to a generation; re-rating
// (package rerate) starts a new one by rewinding the contract's partition
// (partition.Store.Rewind: its generation and version go up by one, so a
// batch of the old generation in flight cannot commit, and its position
// goes back to the generation's from_seq). The new generation is priced
// through the same protocol, batch by batch under the fence, into
// priced_pending, while priced keeps the current generation for every
// reader. The batch that catches up with the contract's records (its new
// position at or beyond the available count its fence read) switches, in
// its own transaction, so with its checkpoint:
//
//  1. the current generation's totals are frozen on its generations row,
//     which becomes superseded;
//  2. its priced rows past the new generation's from_seq move to
//     priced_superseded (the rows up to from_seq are the same in both
//     generations and stay);
//  3. the new generation's pending rows move into priced, its totals are
//     frozen on its row, which becomes current, and
//     contracts.current_generation is set to it.
//
// Exactly once per generation: the pending rows are keyed (contract,
// generation, seq) and written under the fence like priced rows, and a
// switch happens once, in the batch that commits the last position.

// generationOf is the generation of b's checkpoint (1 for a partition
// never rewound).
func generationOf(b *distributor.Batch) int64 { return max(b.Checkpoint.Generation, 1) }

// genState is what a batch of a generation past the first needs to know.
type genState struct {
	pending bool  // the generation is being priced (not current yet)
	fromSeq int64 // its from_seq
}

// readGenerationSQL reads a contract's current generation and the state
// and from_seq of generation ?1 (of contract ?0).
const readGenerationSQL = `SELECT c.current_generation, coalesce(g.state, ''), coalesce(g.from_seq, 0)
  FROM {{.Schema}}.contracts c
  LEFT JOIN {{.Schema}}.generations g ON g.contract_id = c.contract_id AND g.generation = ?1
 WHERE c.contract_id = ?0`

// readGeneration reads how generation gen of contract stands. A batch of a
// generation older than the current one, or of one that is neither being
// priced nor current, is corrupt: the rewind that started a generation
// fenced out every claim of the ones before.
func (p *Processor) readGeneration(ctx context.Context, tx bun.Tx, contract string, gen int64) (genState, error) {
	var (
		current, from int64
		state         string
	)
	err := tx.QueryRowContext(ctx, p.sql(readGenerationSQL), contract, gen).Scan(&current, &state, &from)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return genState{}, fmt.Errorf("%w: partition of contract %s has no contract", ErrCorrupt, contract)
	case err != nil:
		return genState{}, fmt.Errorf("reading the generations of contract %s: %w", contract, err)
	case current == gen:
		return genState{}, nil
	case current < gen && state == "pricing":
		return genState{pending: true, fromSeq: from}, nil
	}
	return genState{}, fmt.Errorf("%w: contract %s: a batch of generation %d (%q), the current generation is %d",
		ErrCorrupt, contract, gen, state, current)
}

// supersedeSQL freezes the totals of the contract's current generation
// (all of priced), marks it superseded and moves its rows past ?1 (the
// new generation's from_seq) to priced_superseded. It returns the old
// generation and the rows moved.
const supersedeSQL = `WITH old AS (
    SELECT current_generation AS generation FROM {{.Schema}}.contracts WHERE contract_id = ?0
), totals AS (
    SELECT count(*) AS n, coalesce(sum(gross_minor), 0) AS g, coalesce(sum(discount_minor), 0) AS d,
           coalesce(sum(net_minor), 0) AS net
      FROM {{.Schema}}.priced WHERE contract_id = ?0
), marked AS (
    UPDATE {{.Schema}}.generations g
       SET state = 'superseded', superseded_at = now(),
           records = t.n, gross_total = t.g, discount_total = t.d, net_total = t.net
      FROM totals t, old o
     WHERE g.contract_id = ?0 AND g.generation = o.generation AND g.state = 'current'
    RETURNING g.generation
), moved AS (
    DELETE FROM {{.Schema}}.priced WHERE contract_id = ?0 AND seq > ?1
    RETURNING *
), kept AS (
    INSERT INTO {{.Schema}}.priced_superseded
        (contract_id, generation, seq, record_id, gross_minor, discount_minor, net_minor, claim_version, priced_by, priced_at)
    SELECT m.contract_id, o.generation, m.seq, m.record_id, m.gross_minor, m.discount_minor, m.net_minor,
           m.claim_version, m.priced_by, m.priced_at
      FROM moved m, old o
    RETURNING 1
)
SELECT (SELECT generation FROM old), (SELECT count(*) FROM marked), (SELECT count(*) FROM kept)`

// promoteSQL moves generation ?1's pending rows into priced, freezes its
// totals (the rows kept in priced up to its from_seq and the ones moved
// in), marks it current and makes it the contract's current generation.
// It returns the rows moved in and the generation rows updated.
const promoteSQL = `WITH pending AS (
    DELETE FROM {{.Schema}}.priced_pending WHERE contract_id = ?0 AND generation = ?1
    RETURNING *
), moved AS (
    INSERT INTO {{.Schema}}.priced
        (contract_id, seq, record_id, gross_minor, discount_minor, net_minor, claim_version, priced_by, priced_at)
    SELECT contract_id, seq, record_id, gross_minor, discount_minor, net_minor, claim_version, priced_by, priced_at
      FROM pending
    RETURNING gross_minor, discount_minor, net_minor
), totals AS (
    SELECT sum(n) AS n, sum(g) AS g, sum(d) AS d, sum(net) AS net FROM (
        SELECT count(*) AS n, coalesce(sum(gross_minor), 0) AS g, coalesce(sum(discount_minor), 0) AS d,
               coalesce(sum(net_minor), 0) AS net
          FROM {{.Schema}}.priced WHERE contract_id = ?0
        UNION ALL
        SELECT count(*), coalesce(sum(gross_minor), 0), coalesce(sum(discount_minor), 0), coalesce(sum(net_minor), 0)
          FROM moved) u
), marked AS (
    UPDATE {{.Schema}}.generations g
       SET state = 'current', finished_at = now(),
           records = t.n, gross_total = t.g, discount_total = t.d, net_total = t.net
      FROM totals t
     WHERE g.contract_id = ?0 AND g.generation = ?1 AND g.state = 'pricing'
    RETURNING 1
), switched AS (
    UPDATE {{.Schema}}.contracts SET current_generation = ?1 WHERE contract_id = ?0
    RETURNING 1
)
SELECT (SELECT count(*) FROM moved), (SELECT count(*) FROM marked), (SELECT count(*) FROM switched)`

// switchGeneration makes generation gen of contract current (see above),
// in the batch's transaction.
//
// Its two statements move the contract's output between tables, so their
// time grows with the contract's records, unlike a batch's other
// statements, which the batch size bounds and the statement timeout
// limits: a smaller retried batch would not make them shorter, and a
// contract whose switch outlasted the statement timeout would fail until
// quarantined. They run without it. Their work is bounded, their lock
// waits keep lock_timeout, the lease's context still cancels them when the
// partition is lost, and the timeout is restored before the batch goes on.
func (p *Processor) switchGeneration(ctx context.Context, tx bun.Tx, contract string, gen, fromSeq int64) error {
	var timeout string
	if err := tx.QueryRowContext(ctx, `SELECT current_setting('statement_timeout'), set_config('statement_timeout', '0', true)`).
		Scan(&timeout, new(string)); err != nil {
		return fmt.Errorf("switching contract %s to generation %d: lifting the statement timeout: %w", contract, gen, err)
	}
	if err := p.switchStatements(ctx, tx, contract, gen, fromSeq); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `SELECT set_config('statement_timeout', ?, true)`, timeout); err != nil {
		return fmt.Errorf("switching contract %s to generation %d: restoring the statement timeout: %w", contract, gen, err)
	}
	return nil
}

func (p *Processor) switchStatements(ctx context.Context, tx bun.Tx, contract string, gen, fromSeq int64) error {
	var old, marked, moved int64
	if err := tx.QueryRowContext(ctx, p.sql(supersedeSQL), contract, fromSeq).Scan(&old, &marked, &moved); err != nil {
		return fmt.Errorf("superseding the current generation of contract %s: %w", contract, err)
	}
	if old >= gen || marked != 1 {
		return fmt.Errorf("%w: contract %s: generation %d cannot supersede generation %d (%d current rows)", ErrCorrupt, contract, gen, old, marked)
	}
	var in, genRows, contracts int64
	if err := tx.QueryRowContext(ctx, p.sql(promoteSQL), contract, gen).Scan(&in, &genRows, &contracts); err != nil {
		return fmt.Errorf("making generation %d of contract %s current: %w", gen, contract, err)
	}
	if genRows != 1 || contracts != 1 {
		return fmt.Errorf("%w: contract %s: generation %d is not being priced", ErrCorrupt, contract, gen)
	}
	return nil
}

// GenerationsInFlight lists the contracts, in byte order, with a
// generation being priced: their output is the previous generation until
// it becomes current, so they are not complete, and VerifyCommitted skips
// them.
func (s *Store) GenerationsInFlight(ctx context.Context) ([]string, error) {
	return s.generationsInFlight(ctx, s.t.DB)
}

// GenerationsInFlightTx is GenerationsInFlight in tx.
func (s *Store) GenerationsInFlightTx(ctx context.Context, tx bun.Tx) ([]string, error) {
	return s.generationsInFlight(ctx, tx)
}

func (s *Store) generationsInFlight(ctx context.Context, db bun.IDB) ([]string, error) {
	var ids []string
	rows, err := db.QueryContext(ctx, s.t.SQL(
		`SELECT contract_id FROM {{.Schema}}.generations WHERE state = 'pricing' ORDER BY contract_id`))
	if err != nil {
		return nil, fmt.Errorf("listing generations being priced: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("listing generations being priced: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing generations being priced: %w", err)
	}
	return ids, nil
}
