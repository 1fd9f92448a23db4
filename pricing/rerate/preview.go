package rerate

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/batonhq/baton/pricing/internal/reprice"
)

// Previews (the package documentation's last paragraphs say more). A
// Request with Preview set starts a preview: a new generation
// priced like any other (the contract's partition is rewound and workers
// price it through the usual protocol, so a worker that dies part-way is
// taken over and its checkpoint resumed) that does not become current when
// it catches up. Its tiers are kept with it, and its amended amounts in
// amendments marked preview: the contract's tiers and records, the priced
// view and exports stay the current generation's until it is approved.
//
// While a preview waits, the current generation stays complete: records
// loaded meanwhile are priced in both. The preview's batches price them
// under the preview's generation and, in the same fenced commit, under the
// current one (with the contract's tiers and the records' own amounts,
// from the current generation's checkpoint kept with the preview), so that
// each record has its row in both generations once the batch that reaches
// it commits.
//
// ApproveTx makes a preview the contract's (its tiers and amounts become
// the contract's) and switches to it in the same transaction if it has
// caught up; otherwise it goes on as a generation being priced, which the
// batch that catches up makes current, as any re-pricing. DiscardTx ends
// it (state discarded, its rows deleted, its amendments removed) and moves
// the partition back to the current generation where that is priced to.
// Both lock the contracts' task rows FOR UPDATE in key order, waiting for
// a batch in flight, so that a decision falls between two batches: nothing
// of a preview is ever half applied. A contract with a preview waiting
// cannot be re-priced or previewed again (ErrPreviewPending) until it is
// approved or discarded.

// Decided is what ApproveTx or DiscardTx did to one contract's preview.
type Decided = reprice.Decided

// ErrPreviewPending is returned, wrapped, by StartTx for a contract whose
// preview waits to be approved or discarded.
var ErrPreviewPending = reprice.ErrPreviewPending

// ErrNoPreview is returned, wrapped, by ApproveTx and DiscardTx for a
// contract named that has no preview waiting.
var ErrNoPreview = reprice.ErrNoPreview

// Approve is ApproveTx in a transaction of its own.
func (s *Store) Approve(ctx context.Context, contracts []string) ([]Decided, error) {
	return s.decide(ctx, contracts, reprice.Approve)
}

// ApproveTx approves, in tx, the previews of contracts (every preview
// waiting if contracts is empty), as the package documentation says. It
// refuses unknown contracts (ErrUnknownContract) and contracts without a
// preview (ErrNoPreview), changing nothing.
func (s *Store) ApproveTx(ctx context.Context, tx bun.Tx, contracts []string) ([]Decided, error) {
	return reprice.Approve(ctx, reprice.Bun(tx), s.t.Schema, contracts)
}

// Discard is DiscardTx in a transaction of its own.
func (s *Store) Discard(ctx context.Context, contracts []string) ([]Decided, error) {
	return s.decide(ctx, contracts, reprice.Discard)
}

// DiscardTx discards, in tx, the previews of contracts (every preview
// waiting if contracts is empty), as the package documentation says. It
// refuses as ApproveTx does.
func (s *Store) DiscardTx(ctx context.Context, tx bun.Tx, contracts []string) ([]Decided, error) {
	return reprice.Discard(ctx, reprice.Bun(tx), s.t.Schema, contracts)
}

func (s *Store) decide(ctx context.Context, contracts []string,
	fn func(context.Context, reprice.Tx, string, []string) ([]Decided, error)) ([]Decided, error) {
	var out []Decided
	err := s.inTx(ctx, func(tx reprice.Tx) error {
		var err error
		out, err = fn(ctx, tx, s.t.Schema, contracts)
		return err
	})
	return out, err
}

// Preview is one contract's preview waiting for a decision, as Previews
// reports it.
type Preview struct {
	Contract string `json:"contract_id"`
	// Generation is the preview's, Current the contract's current one.
	Generation int64 `json:"generation"`
	Current    int64 `json:"current_generation"`
	FromSeq    int64 `json:"from_seq"`
	// CaughtUp says the preview has priced every record of the contract
	// (Priced of Records); until then its totals are what it has priced
	// so far with the records it shares with the current generation.
	CaughtUp bool  `json:"caught_up"`
	Priced   int64 `json:"priced"`
	Records  int64 `json:"records"`
	// The preview's totals, the current generation's net total and the
	// change of the net from it.
	GrossTotal      int64  `json:"gross_total"`
	DiscountTotal   int64  `json:"discount_total"`
	NetTotal        int64  `json:"net_total"`
	CurrentNetTotal int64  `json:"current_net_total"`
	NetChange       int64  `json:"net_change"`
	StartedBy       string `json:"started_by"`
	Reason          string `json:"reason"`
}

// Previews lists the previews waiting for a decision (of contracts, or
// all), by contract, with their totals read from their rows.
func (s *Store) Previews(ctx context.Context, contracts []string) ([]Preview, error) {
	rows, err := s.t.DB.QueryContext(ctx, s.t.SQL(`
SELECT g.contract_id, g.generation, c.current_generation, g.from_seq,
       -- A split preview's segments hold back what its partition's
       -- position says is priced.
       coalesce(t.position, 0) - coalesce((SELECT sum(s.available - s.position) FROM {{.Schema}}.tasks s
                                            WHERE s.kind = 'pricing' AND s.segment_of = g.contract_id AND s.position < s.available), 0)::bigint,
       coalesce(t.available, 0),
       p.gross, p.discount, p.net,
       (SELECT coalesce(sum(r.net_minor), 0)::bigint FROM {{.Schema}}.priced_generation(g.contract_id, c.current_generation) r),
       g.started_by, g.reason
  FROM {{.Schema}}.generations g
  JOIN {{.Schema}}.contracts c ON c.contract_id = g.contract_id
  LEFT JOIN {{.Schema}}.tasks t ON t.kind = 'pricing' AND t.partition_key = g.contract_id AND t.segment_of IS NULL
  CROSS JOIN LATERAL (SELECT coalesce(sum(r.gross_minor), 0)::bigint AS gross, coalesce(sum(r.discount_minor), 0)::bigint AS discount,
                             coalesce(sum(r.net_minor), 0)::bigint AS net
                        FROM {{.Schema}}.priced_generation(g.contract_id, g.generation) r) p
 WHERE g.state = 'preview' AND (coalesce(cardinality(?::text[]), 0) = 0 OR g.contract_id = ANY (?::text[]))
 ORDER BY g.contract_id COLLATE "C"`), pgdialect.Array(contracts), pgdialect.Array(contracts))
	if err != nil {
		return nil, fmt.Errorf("listing previews: %w", err)
	}
	defer rows.Close()
	var out []Preview
	for rows.Next() {
		var p Preview
		if err := rows.Scan(&p.Contract, &p.Generation, &p.Current, &p.FromSeq, &p.Priced, &p.Records,
			&p.GrossTotal, &p.DiscountTotal, &p.NetTotal, &p.CurrentNetTotal, &p.StartedBy, &p.Reason); err != nil {
			return nil, fmt.Errorf("listing previews: %w", err)
		}
		p.CaughtUp = p.Priced >= p.Records
		p.NetChange = p.NetTotal - p.CurrentNetTotal
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing previews: %w", err)
	}
	return out, nil
}
