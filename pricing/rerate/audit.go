package rerate

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/uptrace/bun/dialect/pgdialect"
)

// Generation is one generation of a re-priced contract, as List reports
// it.
type Generation struct {
	Contract   string `json:"contract_id"`
	Generation int64  `json:"generation"`
	State      string `json:"state"` // pricing, preview, current, superseded, abandoned, discarded or pruned
	FromSeq    int64  `json:"from_seq"`
	// StartedAt is when the generation was requested (a load or worker
	// reprice), PricingStartedAt when workers committed its first batch
	// (nil before, and for generation 1), FinishedAt when it became current
	// or was abandoned, PrunedAt when its rows were pruned.
	StartedAt        time.Time  `json:"started_at"`
	PricingStartedAt *time.Time `json:"pricing_started_at,omitempty"`
	FinishedAt       *time.Time `json:"finished_at,omitempty"`
	PrunedAt         *time.Time `json:"pruned_at,omitempty"`
	StartedBy        string     `json:"started_by"`
	Reason           string     `json:"reason"`
	// Records and NetTotal are the generation's priced records and the
	// sum of their nets, read from its rows (for one being priced, what it
	// has priced so far, with the records it shares), or as frozen when it
	// was abandoned or its rows were pruned.
	Records  int64 `json:"records"`
	NetTotal int64 `json:"net_total"`
	// NetChange, of a preview, is its net total less the current
	// generation's.
	NetChange *int64 `json:"net_change,omitempty"`
}

// List lists the generations of the re-priced contracts (all of them if
// contracts is empty), by contract and generation. Contracts never
// re-priced have no generation rows and are not listed.
func (s *Store) List(ctx context.Context, contracts []string) ([]Generation, error) {
	rows, err := s.t.DB.QueryContext(ctx, s.t.SQL(`
SELECT g.contract_id, g.generation, g.state, g.from_seq, g.started_at, g.pricing_started_at, g.finished_at, g.pruned_at,
       g.started_by, g.reason,
       CASE WHEN g.state IN ('pricing', 'preview', 'current', 'superseded')
            THEN (SELECT count(*) FROM {{.Schema}}.priced_generation(g.contract_id, g.generation))
            ELSE coalesce(g.records, 0) END,
       CASE WHEN g.state IN ('pricing', 'preview', 'current', 'superseded')
            THEN (SELECT coalesce(sum(net_minor), 0) FROM {{.Schema}}.priced_generation(g.contract_id, g.generation))
            ELSE coalesce(g.net_total, 0) END
  FROM {{.Schema}}.generations g
 WHERE coalesce(cardinality(?::text[]), 0) = 0 OR g.contract_id = ANY (?::text[])
 ORDER BY g.contract_id, g.generation`), pgdialect.Array(contracts), pgdialect.Array(contracts))
	if err != nil {
		return nil, fmt.Errorf("listing generations: %w", err)
	}
	defer rows.Close()
	var out []Generation
	for rows.Next() {
		var g Generation
		var pricing, finished, pruned sql.NullTime
		if err := rows.Scan(&g.Contract, &g.Generation, &g.State, &g.FromSeq, &g.StartedAt, &pricing, &finished, &pruned,
			&g.StartedBy, &g.Reason, &g.Records, &g.NetTotal); err != nil {
			return nil, fmt.Errorf("listing generations: %w", err)
		}
		g.PricingStartedAt, g.FinishedAt, g.PrunedAt = timeOrNil(pricing), timeOrNil(finished), timeOrNil(pruned)
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing generations: %w", err)
	}
	current := map[string]int64{}
	for _, g := range out {
		if g.State == "current" {
			current[g.Contract] = g.NetTotal
		}
	}
	for i, g := range out {
		if c, ok := current[g.Contract]; ok && g.State == "preview" {
			d := g.NetTotal - c
			out[i].NetChange = &d
		}
	}
	return out, nil
}

// timeOrNil is t's time, or nil if it is NULL.
func timeOrNil(t sql.NullTime) *time.Time {
	if !t.Valid {
		return nil
	}
	return &t.Time
}
