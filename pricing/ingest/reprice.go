package ingest

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/batonhq/baton/internal/pgxconn"
	"github.com/batonhq/baton/pricing/internal/reprice"
	"github.com/batonhq/baton/pricing/rerate"
)

// RepriceOptions says which contracts Reprice starts a new generation of.
type RepriceOptions struct {
	// Contracts are the contracts' ids; All asks for every contract
	// instead (Contracts must then be empty).
	Contracts []string
	All       bool
	// Reason and StartedBy are recorded with the new generations.
	Reason    string
	StartedBy string
	// Preview starts the new generations as previews (see package
	// rerate): priced without becoming current until approved.
	Preview bool
}

// Reprice starts a new generation of the priced output of the contracts
// opts names (as rerate's Store.Start does) under their current tiers, in one
// transaction that first takes the load lock: it and loads changing tiers
// or amounts are serialised, and with All the contracts are listed after
// the lock, so none a load adds meanwhile is missed. It refuses unknown
// contracts (rerate.ErrUnknownContract), changing nothing. The
// transaction is a pgx one, as a load's, so that the rewind sends its lock
// statements in one pipeline.
func (s *Store) Reprice(ctx context.Context, opts RepriceOptions) ([]rerate.Started, error) {
	if opts.All && len(opts.Contracts) > 0 {
		return nil, fmt.Errorf("re-pricing: All and Contracts do not go together")
	}
	var started []rerate.Started
	err := pgxconn.InTx(ctx, s.t.DB.DB.DB, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", loadLockKey); err != nil {
			return fmt.Errorf("re-pricing: waiting for loads to finish: %w", err)
		}
		contracts := opts.Contracts
		if opts.All {
			rows, err := tx.Query(ctx, s.t.SQL(`SELECT contract_id FROM {{.Schema}}.contracts ORDER BY contract_id`))
			if err == nil {
				contracts, err = pgx.CollectRows(rows, pgx.RowTo[string])
			}
			if err != nil {
				return fmt.Errorf("re-pricing: listing contracts: %w", err)
			}
		}
		reqs := make([]rerate.Request, len(contracts))
		for i, c := range contracts {
			reqs[i] = rerate.Request{Contract: c, Reason: opts.Reason, StartedBy: opts.StartedBy, Preview: opts.Preview}
		}
		var err error
		started, err = reprice.Start(ctx, reprice.Pgx(tx), s.t.Schema, reqs)
		return err
	})
	return started, err
}
