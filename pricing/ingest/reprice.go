package ingest

import (
	"cmp"
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/pricing/rerate"
	"github.com/batonhq/baton/schema"
)

// RepriceOptions says which contracts Reprice starts a new generation of.
type RepriceOptions struct {
	// Schema holds baton's tables; empty means schema.Default.
	Schema string
	// Contracts are the contracts' ids; All asks for every contract
	// instead (Contracts must then be empty).
	Contracts []string
	All       bool
	// Reason and StartedBy are recorded with the new generations.
	Reason    string
	StartedBy string
}

// Reprice starts a new generation of the priced output of the contracts
// opts names (rerate.Start) under their current tiers, in one transaction
// that first takes the load lock: it and loads changing tiers or amounts
// are serialised, and with All the contracts are listed after the lock, so
// none a load adds meanwhile is missed. It refuses unknown contracts
// (rerate.ErrUnknownContract), changing nothing.
func Reprice(ctx context.Context, db *bun.DB, opts RepriceOptions) ([]rerate.Started, error) {
	if opts.All && len(opts.Contracts) > 0 {
		return nil, fmt.Errorf("re-pricing: All and Contracts do not go together")
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("re-pricing: acquiring a database connection: %w", err)
	}
	defer conn.Close()
	var started []rerate.Started
	err = dbconn.Raw(conn.Conn, func(pc *pgx.Conn) error {
		return pgx.BeginFunc(ctx, pc, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", loadLockKey); err != nil {
				return fmt.Errorf("re-pricing: waiting for loads to finish: %w", err)
			}
			contracts := opts.Contracts
			if opts.All {
				rows, err := tx.Query(ctx, schema.SQL(cmp.Or(opts.Schema, schema.Default), `SELECT contract_id FROM {{.Schema}}.contracts ORDER BY contract_id`))
				if err != nil {
					return fmt.Errorf("re-pricing: listing contracts: %w", err)
				}
				if contracts, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
					return fmt.Errorf("re-pricing: listing contracts: %w", err)
				}
			}
			reqs := make([]rerate.Request, len(contracts))
			for i, c := range contracts {
				reqs[i] = rerate.Request{Contract: c, Reason: opts.Reason, StartedBy: opts.StartedBy}
			}
			var err error
			started, err = rerate.Start(ctx, tx, opts.Schema, reqs)
			return err
		})
	})
	return started, err
}
