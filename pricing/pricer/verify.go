package pricer

import (
	"context"
	"fmt"
)

// Mismatch is a contract whose priced output disagrees with the
// independent recomputation.
type Mismatch struct {
	ContractID  string
	Records     int64 // accepted records
	Priced      int64 // priced rows
	WantGross   string
	GotGross    string
	WantNet     string // R(G_total) recomputed in SQL
	GotNet      string // sum of per-record nets
	BadRows     int64  // priced rows whose gross differs from the record or gross − discount ≠ net
	Description string
}

// Summary is the outcome of Verify.
type Summary struct {
	Contracts  int64
	Records    int64
	Priced     int64
	Gross      string // total gross over all contracts
	Net        string // total net over all contracts
	Mismatches []Mismatch
}

// Verify recomputes every contract's rounded net R(G_total) independently
// of the Go engine, in SQL numeric arithmetic straight from the tiers and
// the sum of the records, and checks it against the sum of the per-record
// nets, together with exactly-once coverage (one priced row per accepted
// record, same gross) and gross − discount = net on every row.
//
// Records and priced rows removed by retention (PruneLoads) count through
// their sums in pruned_totals: a contract's totals are what is stored plus
// what was pruned, and the row-by-row checks cover what is still stored
// (pruning checked the removed rows the same way before removing them).
//
// A contract with a generation being priced (GenerationsInFlight) is not
// complete: it is reported as a mismatch saying so.
func (st *Store) Verify(ctx context.Context) (Summary, error) {
	var s Summary
	db := st.t.DB
	inFlightIDs, err := st.generationsInFlight(ctx, db)
	if err != nil {
		return s, fmt.Errorf("verifying priced output: %w", err)
	}
	inFlight := make(map[string]bool, len(inFlightIDs))
	for _, id := range inFlightIDs {
		inFlight[id] = true
	}
	rows, err := db.QueryContext(ctx, st.t.SQL(`
		WITH stored AS (
			SELECT contract_id, sum(amount_minor)::numeric AS g, count(*) AS n
			FROM {{.Schema}}.records GROUP BY contract_id
		), totals AS (
			SELECT coalesce(s.contract_id, pt.contract_id) AS contract_id,
			       coalesce(s.g, 0) + coalesce(pt.gross_minor, 0) AS g, coalesce(s.n, 0) + coalesce(pt.records, 0) AS n
			FROM stored s FULL JOIN {{.Schema}}.pruned_totals pt ON pt.contract_id = s.contract_id
		), bands AS (
			SELECT contract_id, threshold_minor::numeric AS t, discount_bp::numeric AS bp,
			       lead(threshold_minor::numeric) OVER (PARTITION BY contract_id ORDER BY threshold_minor) AS t_next
			FROM {{.Schema}}.tiers
		), n AS (
			SELECT tt.contract_id, tt.g, tt.n,
			       10000 * tt.g - coalesce(sum(b.bp * greatest(0, least(tt.g, coalesce(b.t_next, tt.g)) - b.t)), 0) AS nn
			FROM totals tt LEFT JOIN bands b ON b.contract_id = tt.contract_id
			GROUP BY tt.contract_id, tt.g, tt.n
		), want AS (
			SELECT contract_id, g, n, floor(nn / 10000) AS q, nn - 10000 * floor(nn / 10000) AS r FROM n
		), stored_out AS (
			SELECT p.contract_id, count(*) AS n, sum(p.gross_minor)::numeric AS g, sum(p.net_minor)::numeric AS net,
			       count(*) FILTER (WHERE r.amount_minor IS DISTINCT FROM p.gross_minor
			                          OR p.gross_minor - p.discount_minor <> p.net_minor
			                          OR r.record_id IS DISTINCT FROM p.record_id) AS bad
			FROM {{.Schema}}.priced p LEFT JOIN {{.Schema}}.records r ON r.contract_id = p.contract_id AND r.seq = p.seq
			GROUP BY p.contract_id
		), got AS (
			SELECT coalesce(o.contract_id, pt.contract_id) AS contract_id,
			       coalesce(o.n, 0) + coalesce(pt.records, 0) AS n, coalesce(o.g, 0) + coalesce(pt.gross_minor, 0) AS g,
			       coalesce(o.net, 0) + coalesce(pt.net_minor, 0) AS net, coalesce(o.bad, 0) AS bad
			FROM stored_out o FULL JOIN {{.Schema}}.pruned_totals pt ON pt.contract_id = o.contract_id
		)
		SELECT w.contract_id, w.n, coalesce(g.n, 0), w.g::text, coalesce(g.g, 0)::text,
		       (w.q + CASE WHEN w.r > 5000 OR (w.r = 5000 AND mod(w.q, 2) = 1) THEN 1 ELSE 0 END)::text,
		       coalesce(g.net, 0)::text, coalesce(g.bad, 0),
		       w.n = coalesce(g.n, 0) AND w.g = coalesce(g.g, 0) AND coalesce(g.bad, 0) = 0
		         AND (w.q + CASE WHEN w.r > 5000 OR (w.r = 5000 AND mod(w.q, 2) = 1) THEN 1 ELSE 0 END) = coalesce(g.net, 0)
		FROM want w LEFT JOIN got g ON g.contract_id = w.contract_id
		ORDER BY w.contract_id`))
	if err != nil {
		return s, fmt.Errorf("verifying priced output: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var m Mismatch
		var ok bool
		if err := rows.Scan(&m.ContractID, &m.Records, &m.Priced, &m.WantGross, &m.GotGross, &m.WantNet, &m.GotNet, &m.BadRows, &ok); err != nil {
			return s, fmt.Errorf("verifying priced output: %w", err)
		}
		s.Contracts++
		s.Records += m.Records
		s.Priced += m.Priced
		if inFlight[m.ContractID] {
			m.Description = fmt.Sprintf("contract %s: a new generation is being priced (the output is its previous one until then)", m.ContractID)
			s.Mismatches = append(s.Mismatches, m)
		} else if !ok {
			m.Description = fmt.Sprintf("contract %s: %d records, %d priced; gross %s vs %s; net %s, recomputed %s; %d bad rows",
				m.ContractID, m.Records, m.Priced, m.GotGross, m.WantGross, m.GotNet, m.WantNet, m.BadRows)
			s.Mismatches = append(s.Mismatches, m)
		}
	}
	if err := rows.Err(); err != nil {
		return s, fmt.Errorf("verifying priced output: %w", err)
	}
	// The priced rows without a record are counted by an anti-join (NOT
	// EXISTS in WHERE), which reads the records once; inside an aggregate
	// it would be a lookup per priced row, and records (a view over the
	// chunks) cannot be looked up by seq.
	var orphans int64
	if err := db.QueryRowContext(ctx, st.t.SQL(`
		SELECT (SELECT coalesce(sum(gross_minor), 0)::text FROM {{.Schema}}.priced),
		       (SELECT coalesce(sum(net_minor), 0)::text FROM {{.Schema}}.priced),
		       (SELECT count(*) FROM {{.Schema}}.priced p
		         WHERE NOT EXISTS (SELECT 1 FROM {{.Schema}}.records r WHERE r.contract_id = p.contract_id AND r.seq = p.seq))`)).Scan(&s.Gross, &s.Net, &orphans); err != nil {
		return s, fmt.Errorf("verifying priced output: %w", err)
	}
	if orphans > 0 {
		s.Mismatches = append(s.Mismatches, Mismatch{Description: fmt.Sprintf("%d priced rows have no record", orphans)})
	}
	return s, nil
}
