package main

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/pricing/ingest"
	"github.com/batonhq/baton/pricing/pricer"
)

// The bench keeps its databases as bun handles (opened by dbconn.Open and
// used for its own SQL); the pricing packages take baton's handle, which
// these describe them as: direct connections, without timeouts of their
// own.

// batonDB describes db, opened by dbconn.Open, as baton's handle.
func batonDB(ctx context.Context, db *bun.DB) (*dbconn.DB, error) {
	bdb, err := dbconn.Wrap(ctx, db, dbconn.Access{})
	if err != nil {
		return nil, fmt.Errorf("describing the database handle: %w", err)
	}
	return bdb, nil
}

// loadPricing loads with baton's loader into db.
func loadPricing(ctx context.Context, db *bun.DB, opts ingest.Options) (ingest.Report, error) {
	bdb, err := batonDB(ctx, db)
	if err != nil {
		return ingest.Report{}, err
	}
	return ingest.NewStore(bdb, "").Load(ctx, opts)
}

// verifyPricing runs pricer's Verify, the independent SQL recomputation,
// on db.
func verifyPricing(ctx context.Context, db *bun.DB) (pricer.Summary, error) {
	bdb, err := batonDB(ctx, db)
	if err != nil {
		return pricer.Summary{}, err
	}
	return pricer.NewStore(bdb, "").Verify(ctx)
}
