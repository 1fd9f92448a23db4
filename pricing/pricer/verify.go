package pricer

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/uptrace/bun"
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
//
// It reads in one snapshot (a read-only REPEATABLE READ transaction), so
// that what is in flight, the per-contract checks and the totals agree
// while workers run, and reads the priced rows once: the per-contract
// sums, the totals and the rows without a record all come from one join
// of the priced rows with their records.
func (st *Store) Verify(ctx context.Context) (Summary, error) {
	var s Summary
	err := st.t.DB.RunInTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true},
		func(ctx context.Context, tx bun.Tx) error {
			var err error
			s, err = st.verify(ctx, tx)
			return err
		})
	if err != nil {
		return Summary{}, fmt.Errorf("verifying priced output: %w", err)
	}
	return s, nil
}

func (st *Store) verify(ctx context.Context, tx bun.Tx) (Summary, error) {
	var s Summary
	inFlightIDs, err := st.generationsInFlight(ctx, tx)
	if err != nil {
		return s, err
	}
	inFlight := make(map[string]bool, len(inFlightIDs))
	for _, id := range inFlightIDs {
		inFlight[id] = true
	}
	// checked compares each priced row with its record in one join of the
	// two sets (MATERIALIZED: read once for got and for overall). A priced
	// row without a record is bad in its contract and counted in orphans,
	// which also covers contracts with no records at all (absent from
	// want). overall is one row even when there are no contracts, so the
	// totals are always read.
	rows, err := tx.QueryContext(ctx, st.t.SQL(`
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
		), checked AS MATERIALIZED (
			SELECT p.contract_id, count(*) AS n, sum(p.gross_minor)::numeric AS g, sum(p.net_minor)::numeric AS net,
			       count(*) FILTER (WHERE r.amount_minor IS DISTINCT FROM p.gross_minor
			                          OR p.gross_minor - p.discount_minor <> p.net_minor
			                          OR r.record_id IS DISTINCT FROM p.record_id) AS bad,
			       count(*) FILTER (WHERE r.seq IS NULL) AS orphans
			FROM {{.Schema}}.priced p LEFT JOIN {{.Schema}}.records r ON r.contract_id = p.contract_id AND r.seq = p.seq
			GROUP BY p.contract_id
		), got AS (
			SELECT coalesce(o.contract_id, pt.contract_id) AS contract_id,
			       coalesce(o.n, 0) + coalesce(pt.records, 0) AS n, coalesce(o.g, 0) + coalesce(pt.gross_minor, 0) AS g,
			       coalesce(o.net, 0) + coalesce(pt.net_minor, 0) AS net, coalesce(o.bad, 0) AS bad
			FROM checked o FULL JOIN {{.Schema}}.pruned_totals pt ON pt.contract_id = o.contract_id
		), overall AS (
			SELECT coalesce(sum(g), 0)::text AS g, coalesce(sum(net), 0)::text AS net, coalesce(sum(orphans), 0) AS orphans
			FROM checked
		), per AS (
			SELECT w.contract_id, w.n, coalesce(g.n, 0) AS got_n, w.g::text AS want_g, coalesce(g.g, 0)::text AS got_g,
			       (w.q + CASE WHEN w.r > 5000 OR (w.r = 5000 AND mod(w.q, 2) = 1) THEN 1 ELSE 0 END)::text AS want_net,
			       coalesce(g.net, 0)::text AS got_net, coalesce(g.bad, 0) AS bad,
			       w.n = coalesce(g.n, 0) AND w.g = coalesce(g.g, 0) AND coalesce(g.bad, 0) = 0
			         AND (w.q + CASE WHEN w.r > 5000 OR (w.r = 5000 AND mod(w.q, 2) = 1) THEN 1 ELSE 0 END) = coalesce(g.net, 0) AS ok
			FROM want w LEFT JOIN got g ON g.contract_id = w.contract_id
		)
		SELECT o.g, o.net, o.orphans, p.contract_id, p.n, p.got_n, p.want_g, p.got_g, p.want_net, p.got_net, p.bad, p.ok
		FROM overall o LEFT JOIN per p ON true
		ORDER BY p.contract_id`))
	if err != nil {
		return s, err
	}
	defer rows.Close()
	var orphans int64
	for rows.Next() {
		var (
			m  Mismatch
			id sql.NullString
			ok sql.NullBool
			n  [3]sql.NullInt64
			t  [4]sql.NullString
		)
		if err := rows.Scan(&s.Gross, &s.Net, &orphans, &id, &n[0], &n[1], &t[0], &t[1], &t[2], &t[3], &n[2], &ok); err != nil {
			return s, err
		}
		if !id.Valid {
			continue // no contracts: overall's row alone
		}
		m.ContractID, m.Records, m.Priced, m.BadRows = id.String, n[0].Int64, n[1].Int64, n[2].Int64
		m.WantGross, m.GotGross, m.WantNet, m.GotNet = t[0].String, t[1].String, t[2].String, t[3].String
		s.Contracts++
		s.Records += m.Records
		s.Priced += m.Priced
		if inFlight[m.ContractID] {
			m.Description = fmt.Sprintf("contract %s: a new generation is being priced (the output is its previous one until then)", m.ContractID)
			s.Mismatches = append(s.Mismatches, m)
		} else if !ok.Bool {
			m.Description = fmt.Sprintf("contract %s: %d records, %d priced; gross %s vs %s; net %s, recomputed %s; %d bad rows",
				m.ContractID, m.Records, m.Priced, m.GotGross, m.WantGross, m.GotNet, m.WantNet, m.BadRows)
			s.Mismatches = append(s.Mismatches, m)
		}
	}
	if err := rows.Err(); err != nil {
		return s, err
	}
	if orphans > 0 {
		s.Mismatches = append(s.Mismatches, Mismatch{Description: fmt.Sprintf("%d priced rows have no record", orphans)})
	}
	return s, nil
}
