package main

import (
	"context"
	"fmt"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
)

// takeoverFates counts, from the ownership history, the takeovers of the
// contracts a killed worker held, those whose taker handed the contract
// back for rebalance, and of those the ones whose next claim went to
// another survivor (a worker running at the kill, not the replacement
// started after it): a survivor that took more than its share of the dead
// worker's contracts, confirmed them and gave some to another survivor.
// ToSurvivorUnbatched are those handed over before the taker's first
// batch.
type takeoverFates struct {
	Takeovers           int `json:"takeovers"`
	HandedBack          int `json:"takeovers_handed_back"`
	ToSurvivor          int `json:"takeovers_handed_to_a_survivor"`
	ToSurvivorUnbatched int `json:"takeovers_handed_to_a_survivor_before_a_batch"`
}

// readTakeoverFates reads the fates of the takeovers of contracts since
// dbAt (the kill, on the database's clock), survivors being the names of
// the workers running at the kill besides the victim.
func readTakeoverFates(ctx context.Context, db bun.IDB, contracts []string, dbAt time.Time, survivors []string) (takeoverFates, error) {
	var f takeoverFates
	err := db.QueryRowContext(ctx, `
		WITH t AS (
		  SELECT EXISTS (SELECT 1 FROM baton.events r WHERE r.task_kind = t.task_kind AND r.partition_key = t.partition_key
		                   AND r.version = t.version AND r.kind = 'released' AND r.detail = 'rebalance') AS back,
		         EXISTS (SELECT 1 FROM baton.events b WHERE b.task_kind = t.task_kind AND b.partition_key = t.partition_key
		                   AND b.version = t.version AND b.kind = 'first_batch') AS batched,
		         (SELECT split_part(n.worker, '#', 1) FROM baton.events n WHERE n.task_kind = t.task_kind
		            AND n.partition_key = t.partition_key AND n.version > t.version AND n.kind IN ('claimed', 'takeover')
		          ORDER BY n.version LIMIT 1) AS next
		  FROM baton.events t
		  WHERE t.kind = 'takeover' AND t.partition_key = ANY (?::text[]) AND t.at >= ?
		)
		SELECT count(*), count(*) FILTER (WHERE back), count(*) FILTER (WHERE back AND next = ANY (?::text[])),
		       count(*) FILTER (WHERE back AND next = ANY (?::text[]) AND NOT batched)
		FROM t`, pgdialect.Array(contracts), dbAt, pgdialect.Array(survivors), pgdialect.Array(survivors)).
		Scan(&f.Takeovers, &f.HandedBack, &f.ToSurvivor, &f.ToSurvivorUnbatched)
	if err != nil {
		return f, fmt.Errorf("reading the takeovers' fates: %w", err)
	}
	return f, nil
}
