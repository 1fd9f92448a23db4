package main

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"
)

// takeoverFates counts, from the ownership history, the takeovers of a
// run and those whose taker handed the contract back for rebalance, and of
// those how many before the taker's first batch: a survivor that took more
// than its share of a dead worker's contracts, confirmed them and gave
// some back to another survivor.
type takeoverFates struct {
	Takeovers         int `json:"takeovers"`
	HandedBack        int `json:"takeovers_handed_back"`
	HandedBackUnbatch int `json:"takeovers_handed_back_before_a_batch"`
}

func readTakeoverFates(ctx context.Context, db bun.IDB) (takeoverFates, error) {
	var f takeoverFates
	err := db.QueryRowContext(ctx, `
		SELECT count(*), count(*) FILTER (WHERE back), count(*) FILTER (WHERE back AND NOT batched)
		FROM (
		  SELECT EXISTS (SELECT 1 FROM baton.events r WHERE r.task_kind = t.task_kind AND r.partition_key = t.partition_key
		                   AND r.version = t.version AND r.kind = 'released' AND r.detail = 'rebalance') AS back,
		         EXISTS (SELECT 1 FROM baton.events b WHERE b.task_kind = t.task_kind AND b.partition_key = t.partition_key
		                   AND b.version = t.version AND b.kind = 'first_batch') AS batched
		  FROM baton.events t WHERE t.kind = 'takeover'
		) x`).Scan(&f.Takeovers, &f.HandedBack, &f.HandedBackUnbatch)
	if err != nil {
		return f, fmt.Errorf("reading the takeovers' fates: %w", err)
	}
	return f, nil
}
