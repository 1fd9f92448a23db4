package pricer

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/pricing/internal/tables"
)

// Generations. A contract's priced output belongs to a generation; re-rating
// (package rerate) starts a new one by rewinding the contract's partition
// (partition.Store.Rewind: its generation and version go up by one, so a
// batch of the old generation in flight cannot commit, and its position
// goes back to the generation's from_seq). The new generation is priced
// through the same protocol, batch by batch under the fence, into
// priced_rows under its own generation number, where its rows stay: the
// records up to from_seq keep the rows of the generations before, shared.
//
// Generation G's rows of a contract are, for each seq, the row of the
// greatest generation <= G (the SQL function priced_generation), and the
// contract's current rows, which every reader sees through the priced view,
// are its current generation's: a generation being priced is newer than
// the current one and invisible there. The batch that catches up with the
// contract's records switches, in its own transaction, so with its
// checkpoint and its last rows: the current generation's row becomes
// superseded, the new one's current, and contracts.current_generation is
// set to it. Three single-row updates, whatever the contract's size; no
// priced row is read or moved. Totals are read from the rows when asked
// (rerate.List) and frozen when a generation's rows are pruned.
//
// A generation being priced is split into segments like any backlog
// (Split), so a large contract is re-priced by as many workers as it is
// first priced by. Its pieces (the contract's partition and its segments)
// then catch up each in its own batch, in any order, and the generation
// may switch only in the batch of the last. A piece's batch that catches
// up (its new position at or beyond the available count its fence read)
// first locks the generation's row (an UPDATE that changes nothing), then,
// in a statement of its own, so under a snapshot taken once it holds the
// lock, counts the contract's other pieces not caught up, and switches
// when there are none. The lock serializes the pieces' last batches: of
// two that run at once the second reads after the first committed, so it
// sees that piece caught up, and the last to commit switches; neither can
// miss the other (in REPEATABLE READ the second's UPDATE fails on the
// first's, and its retry starts a new snapshot). A piece not caught up
// is either behind, and its own last batch will look, or has records
// added meanwhile (the partition, by a load), which it prices and then
// looks. The partition of a contract with no segments skips the lock:
// only its own batches split it (read at its batch's start), so it is the
// only piece. Lock order: a batch holds its task row (the fence) before
// the generation row; a re-pricing that abandons the generation takes the
// contract's task rows (its rewind, segments included) before that row
// (package reprice), and the first batch of a generation, which records
// the start of its pricing on the row, is its partition's before any
// segment exists, so no cycle forms.
//
// A preview is split too when the current generation has priced every
// record it has pending (preview.go), and its pieces' last batches take
// the same lock, but switch nothing while it is a preview. An approval
// takes the contract's task row, then the generation's row, and only
// then reads the pieces' checkpoints: a piece's last batch that locked
// the row first has committed by then, and is read as caught up; one
// that locks it after waits for the approval, then reads the state the
// approval left, and if the approval found the preview behind (now being
// priced) it counts the pieces and, as the last, switches. A discard
// rewinds the contract's task rows, segments included, before it takes
// the generation's row, as a re-pricing that abandons a generation does.
//
// Exactly once per generation: rows are keyed (contract, seq, generation)
// and written under the fence, and a switch happens once, in the batch
// that commits the last position of the last piece.

// generationOf is the generation of b's checkpoint (1 for a partition
// never rewound).
func generationOf(b *distributor.Batch) int64 { return max(b.Checkpoint.Generation, 1) }

// genState is what a batch of a generation past the first needs to know.
type genState struct {
	pending bool // the generation is being priced (not current yet)
	// segmented: the contract has segment rows, so the partition's batch
	// that catches up may not be the last piece to (switchWhenLast).
	segmented bool
	// preview is set for a preview's batch (see preview.go).
	preview *previewState
}

// readGenerationSQL reads a contract's current generation, the state of
// generation ?1 (of contract ?0) and whether its pricing started, and, of
// a preview, its tiers, how far the current generation is priced and
// whether it has amendments; and whether the contract has segments.
const readGenerationSQL = `SELECT c.current_generation, coalesce(g.state, ''), g.pricing_started_at IS NOT NULL,
       coalesce(g.tiers::text, ''), coalesce(g.base_position, 0), coalesce(g.base_checkpoint::text, ''),
       coalesce(g.state = 'preview' AND EXISTS (SELECT 1 FROM {{.Schema}}.amendments a
                                                 WHERE a.contract_id = ?0 AND a.generation = ?1 AND a.preview), false),
       EXISTS (SELECT 1 FROM {{.Schema}}.tasks t WHERE t.kind = '` + Kind + `' AND t.segment_of = ?0)
  FROM {{.Schema}}.contracts c
  LEFT JOIN {{.Schema}}.generations g ON g.contract_id = c.contract_id AND g.generation = ?1
 WHERE c.contract_id = ?0`

// readGeneration reads how generation gen of contract stands
// (generationStanding), and records the start of its pricing with its
// first batch.
func (p *Processor) readGeneration(ctx context.Context, tx bun.Tx, contract string, gen int64) (genState, error) {
	var (
		current       int64
		state         string
		started       bool
		tiers, baseCP string
		basePos       int64
		amended       bool
		segmented     bool
	)
	err := tx.QueryRowContext(ctx, p.sql(readGenerationSQL), contract, gen).Scan(&current, &state, &started, &tiers, &basePos, &baseCP, &amended, &segmented)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return genState{}, fmt.Errorf("%w: partition of contract %s has no contract", ErrCorrupt, contract)
	case err != nil:
		return genState{}, fmt.Errorf("reading the generations of contract %s: %w", contract, err)
	}
	pending, err := generationStanding(contract, gen, current, state)
	if err != nil || !pending {
		return genState{}, err
	}
	if !started {
		if err := p.markPricingStarted(ctx, tx, []string{contract}, []int64{gen}); err != nil {
			return genState{}, err
		}
	}
	st := genState{pending: true, segmented: segmented}
	if state == "preview" {
		pv, err := newPreviewState(contract, current, tiers, basePos, baseCP)
		if err != nil {
			return genState{}, err
		}
		pv.amended = amended
		st.preview = pv
	}
	return st, nil
}

// generationStanding reports whether generation gen of contract, in state
// state, is being priced (or previewed) and not current yet, where current
// is the contract's current generation. A batch of a generation older
// than the current one, or of one that is neither being priced nor
// current, is corrupt: the rewind that started a generation fenced out
// every claim of the ones before.
func generationStanding(contract string, gen, current int64, state string) (pending bool, err error) {
	switch {
	case current == gen:
		return false, nil
	case current < gen && (state == "pricing" || state == "preview"):
		return true, nil
	}
	return false, fmt.Errorf("%w: contract %s: a batch of generation %d (%q), the current generation is %d",
		ErrCorrupt, contract, gen, state, current)
}

// markPricingStarted records, with the first batch of each generation
// gens[i] of contracts[i], when its pricing started: one statement for a
// group's members. That batch is the contract's partition's (a rewind
// removes the segments, and only the partition's batches split it anew),
// so no other batch contends for the rows; were one to, it would wait for
// this commit and then change nothing.
func (p *Processor) markPricingStarted(ctx context.Context, tx bun.Tx, contracts []string, gens []int64) error {
	if _, err := tx.ExecContext(ctx, p.sql(`UPDATE {{.Schema}}.generations g SET pricing_started_at = now()
		  FROM unnest(?::text[], ?::bigint[]) AS m(contract_id, generation)
		 WHERE g.contract_id = m.contract_id AND g.generation = m.generation AND g.pricing_started_at IS NULL`),
		pgdialect.Array(contracts), pgdialect.Array(gens)); err != nil {
		if len(contracts) == 1 {
			return fmt.Errorf("recording the start of generation %d of contract %s: %w", gens[0], contracts[0], err)
		}
		return fmt.Errorf("recording the start of the new generations of %d contracts (%s, …): %w", len(contracts), contracts[0], err)
	}
	return nil
}

// lockPricingSQL locks generation ?1 of contract ?0, being priced or
// previewed, for the batch of one of its pieces that caught up (see
// above), and reads its state: an UPDATE that changes nothing, so that in
// REPEATABLE READ a concurrent one fails instead of leaving a stale
// snapshot.
const lockPricingSQL = `UPDATE {{.Schema}}.generations SET state = state
 WHERE contract_id = ?0 AND generation = ?1 AND state IN ('pricing', 'preview')
 RETURNING state`

// piecesBehindSQL counts the pieces of contract ?0 (its partition and its
// segments) but those named ?1 that have not caught up with their records.
const piecesBehindSQL = `SELECT count(*) FROM {{.Schema}}.tasks
 WHERE kind = '` + Kind + `' AND (partition_key = ?0 OR segment_of = ?0) AND partition_key <> ALL (?1::text[]) AND position < available`

// switchWhenLast is called in the transaction of batches of a generation
// being priced (or of a split preview's pieces), of contract, that caught up with their
// pieces' records (caughtUp, their keys: one for a batch alone, every
// such member of the contract for a group, whose checkpoints are written
// after the processor returns): it switches the contract to generation
// gen if no other piece is behind (see above); a preview's piece only
// takes the lock, and switches nothing unless an approval made the
// preview a generation being priced meanwhile. look says to look: the
// contract has segments, or a batch is a segment's; the partition of a
// contract with no segments is its only piece.
func (p *Processor) switchWhenLast(ctx context.Context, tx bun.Tx, contract string, gen int64, caughtUp []string, look bool) error {
	if look {
		var state string
		err := tx.QueryRowContext(ctx, p.sql(lockPricingSQL), contract, gen).Scan(&state)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("%w: contract %s: generation %d is neither being priced nor previewed", ErrCorrupt, contract, gen)
		case err != nil:
			return fmt.Errorf("locking generation %d of contract %s: %w", gen, contract, err)
		case state == "preview":
			// Not approved (yet): an approval from now on reads this
			// piece caught up.
			return nil
		}
		var behind int64
		if err := tx.QueryRowContext(ctx, p.sql(piecesBehindSQL), contract, pgdialect.Array(caughtUp)).Scan(&behind); err != nil {
			return fmt.Errorf("reading the pieces of contract %s: %w", contract, err)
		}
		if behind > 0 {
			return nil
		}
	}
	return p.switchGenerations(ctx, tx, []string{contract}, []int64{gen})
}

// isSegment reports whether b is a segment's batch.
func isSegment(b *distributor.Batch) bool { return contractOf(b) != b.Lease.Key }

// switchGenerations makes generation gens[i] of contracts[i] current,
// for each i (see above), and records its pricing as started if its first
// batch is this one (readGroupGenerations leaves that to the switch), in
// the batch's transaction: one statement for
// them all (a group's members that caught up), three single-row updates
// a contract, so the statement timeout applies to it as to the batch's
// other statements.
func (p *Processor) switchGenerations(ctx context.Context, tx bun.Tx, contracts []string, gens []int64) error {
	doing := func() string {
		if len(contracts) == 1 {
			return fmt.Sprintf("switching contract %s to generation %d", contracts[0], gens[0])
		}
		return fmt.Sprintf("switching %d contracts (%s, …) to their new generations", len(contracts), contracts[0])
	}
	rows, err := tx.Tx.QueryContext(ctx, p.sql(tables.SwitchSQL), contracts, gens, true)
	if err != nil {
		return fmt.Errorf("%s: %w", doing(), err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var (
			contract                string
			old, promoted, switched int64
		)
		if err := rows.Scan(&contract, &old, &promoted, &switched); err != nil {
			return fmt.Errorf("%s: %w", doing(), err)
		}
		if n >= len(contracts) || contract != contracts[n] {
			return fmt.Errorf("%s: %w: a row for contract %s, at %d", doing(), ErrCorrupt, contract, n)
		}
		if gen := gens[n]; old == 0 || old >= gen || promoted != 1 || switched != 1 {
			return fmt.Errorf("%w: contract %s: generation %d cannot supersede generation %d (%d being priced)",
				ErrCorrupt, contract, gen, old, promoted)
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("%s: %w", doing(), err)
	}
	if n != len(contracts) {
		return fmt.Errorf("%s: %w: %d rows", doing(), ErrCorrupt, n)
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
