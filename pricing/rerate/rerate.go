// Package rerate re-prices contracts: corrected tiers, amended records or
// an operator's request start a new generation of a contract's priced
// output.
//
// A contract's priced output belongs to a generation (generation 1 until
// it is first re-priced). Store.StartTx, in the caller's transaction (or
// Store.Start, in one of its own), rewinds the contract's pricing
// partition (partition.Store.Rewind) to the last record whose priced row
// stays the same: its generation and version go up by one, so a worker
// still pricing the old generation cannot commit again, and its
// checkpoint becomes the one the current generation had at that record. Workers then price the new generation through the usual
// protocol (claims, fence, checkpoints, takeover), writing its rows once,
// into priced_rows under its generation number; readers keep seeing
// priced, the current generation's view, until the batch that catches up
// with the contract's records makes the new generation current in one
// commit that changes no priced row (package pricer, generations.go). The
// generation it replaced stays readable in place (its view,
// priced_generation) for audit until Store.Prune removes its rows.
//
// Only what changed is priced again: an amended record re-prices its
// contract from that record on (the records before it keep their
// cumulative gross, so their amounts are unchanged), a tier change
// re-prices the whole contract, and contracts not named are untouched.
//
// The generations table records, for each generation of a re-priced
// contract, its state (pricing, current, superseded, abandoned or pruned), the
// record from which it priced anew (from_seq), who started it and why,
// when it started and finished, the tiers it priced with and its totals;
// the amendments table the amounts an amendment replaced.
//
// A preview (Request.Preview) is a new generation priced without becoming
// current: its tiers and amended amounts wait with it, readers and exports
// keep the current generation, and records loaded meanwhile are priced in
// both (the preview's batches price them under the current generation
// too, from its checkpoint kept with the preview). Store.ApproveTx makes it
// current (at once if it has caught up, otherwise once it does), and
// Store.DiscardTx drops it and moves the contract's partition back to its
// current generation; both lock the contracts' task rows, so a decision
// falls between two batches and nothing of a preview is half applied.
// Store.Previews, DiffPreview and List show the previews waiting.
package rerate

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgxconn"
	"github.com/batonhq/baton/pricing/internal/reprice"
	"github.com/batonhq/baton/pricing/internal/tables"
)

// Request asks for a contract to be re-priced: Contract, From (the last
// record whose priced row stays as it is; 0 re-prices the whole
// contract), Reason and StartedBy (recorded with the new generation) and
// NewTiers (if set, the contract's new tiers, and the whole contract is
// re-priced with them).
type Request = reprice.Request

// Started is what Start did for one contract: the new Generation being
// priced (0 when none was needed), From, the last record whose priced
// row it shares with the current one, and Abandoned, the generation in
// flight it replaced (0 if none).
type Started = reprice.Started

// ErrUnknownContract is returned, wrapped, for a request naming a contract
// that does not exist.
var ErrUnknownContract = reprice.ErrUnknownContract

// ErrPruned is returned, wrapped, for a contract whose records were
// partly removed by retention (worker prune): its output cannot be priced
// again without them.
var ErrPruned = reprice.ErrPruned

// Store is the generations of the contracts in the pricing tables of one
// schema of one database.
type Store struct{ t tables.Tables }

// NewStore returns the generations of the pricing tables in PostgreSQL
// schema schemaName (empty means schema.Default, "baton") of db.
func NewStore(db *dbconn.DB, schemaName string) *Store {
	return &Store{tables.New(db, schemaName)}
}

// Start is StartTx in a transaction of its own, committed when it
// succeeds.
func (s *Store) Start(ctx context.Context, reqs []Request) ([]Started, error) {
	var out []Started
	err := s.inTx(ctx, func(tx reprice.Tx) error {
		var err error
		out, err = reprice.Start(ctx, tx, s.t.Schema, reqs)
		return err
	})
	return out, err
}

// inTx runs fn in a transaction of its own, on the pgx connection behind
// one of the handle's, as the loader does: there the rewind sends its
// lock statements, one per contract, in one pipeline rather than one
// round trip each (10,000 contracts: about 3 s less).
func (s *Store) inTx(ctx context.Context, fn func(reprice.Tx) error) error {
	return pgxconn.InTx(ctx, s.t.DB.DB.DB, func(tx pgx.Tx) error { return fn(reprice.Pgx(tx)) })
}

// StartTx re-prices the contracts of reqs in tx (which the caller
// commits): for each, it abandons a generation still being priced (its
// pending rows are deleted, and the new generation starts at the earlier
// of the two From), replaces the tiers if NewTiers is set, records
// generation 1 if the contract was never re-priced, rewinds the
// contract's partition to From with the checkpoint the current generation
// had there, and records the new generation as being priced. For a
// contract split into segments that have records still to price, From is
// at most its processed prefix (Started.From says where the new
// generation starts); the rewind removes the segments.
//
// A rewind is needed only where the partition has priced past From or a
// generation is in flight; otherwise nothing is priced that the change
// affects, and the contract's next batches price it (Started.Generation is
// 0). Requests for the same contract are merged (the lowest From).
//
// StartTx locks the contracts' task rows FOR UPDATE in partition_key
// order, waiting for a batch in flight on them to end; a caller that locks
// task rows itself must have locked these already, in the same order. It
// refuses unknown contracts (ErrUnknownContract) and contracts with pruned
// records (ErrPruned), changing nothing.
func (s *Store) StartTx(ctx context.Context, tx bun.Tx, reqs []Request) ([]Started, error) {
	return reprice.Start(ctx, reprice.Bun(tx), s.t.Schema, reqs)
}
