package main

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"
)

// pricingProgress reads the records priced and the records waiting over
// all contracts, their segments included: partition_progress, never the
// task rows' positions, which a split moves past records its segments
// have yet to price (and a segment row is no contract).
func pricingProgress(ctx context.Context, db bun.IDB) (priced, backlog int64, err error) {
	if err := db.QueryRowContext(ctx, `SELECT coalesce(sum(available - pending), 0)::bigint, coalesce(sum(pending), 0)::bigint
		FROM baton.partition_progress WHERE kind = 'pricing'`).Scan(&priced, &backlog); err != nil {
		return 0, 0, fmt.Errorf("reading progress: %w", err)
	}
	return priced, backlog, nil
}
