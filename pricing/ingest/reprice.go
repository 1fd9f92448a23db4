package ingest

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"

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
// opts names (rerate's Store.StartTx) under their current tiers, in one
// transaction that first takes the load lock: it and loads changing tiers
// or amounts are serialised, and with All the contracts are listed after
// the lock, so none a load adds meanwhile is missed. It refuses unknown
// contracts (rerate.ErrUnknownContract), changing nothing.
func (s *Store) Reprice(ctx context.Context, opts RepriceOptions) ([]rerate.Started, error) {
	if opts.All && len(opts.Contracts) > 0 {
		return nil, fmt.Errorf("re-pricing: All and Contracts do not go together")
	}
	var started []rerate.Started
	err := s.t.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock(?)", loadLockKey); err != nil {
			return fmt.Errorf("re-pricing: waiting for loads to finish: %w", err)
		}
		contracts := opts.Contracts
		if opts.All {
			if err := tx.NewRaw(s.t.SQL(`SELECT contract_id FROM {{.Schema}}.contracts ORDER BY contract_id`)).Scan(ctx, &contracts); err != nil {
				return fmt.Errorf("re-pricing: listing contracts: %w", err)
			}
		}
		reqs := make([]rerate.Request, len(contracts))
		for i, c := range contracts {
			reqs[i] = rerate.Request{Contract: c, Reason: opts.Reason, StartedBy: opts.StartedBy, Preview: opts.Preview}
		}
		var err error
		started, err = rerate.NewStore(s.t.DB, s.t.Schema).StartTx(ctx, tx, reqs)
		return err
	})
	return started, err
}
