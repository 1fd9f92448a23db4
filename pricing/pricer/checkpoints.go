package pricer

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/schema"
)

// CommittedMismatch is a contract whose committed output disagrees with
// the independent recomputation of its checkpointed prefix.
type CommittedMismatch struct {
	ContractID string
	Position   int64  // the checkpoint
	Records    int64  // records with seq <= position
	Priced     int64  // priced rows
	MaxSeq     int64  // highest priced seq
	BadRows    int64  // priced rows whose gross differs from the record or gross − discount ≠ net
	WantNet    string // R(G) of the prefix, recomputed in SQL
	GotNet     string // sum of the priced nets
}

func (m CommittedMismatch) String() string {
	return fmt.Sprintf("contract %s: checkpoint %d, %d records up to it, %d priced (up to seq %d), %d bad rows; net %s, recomputed %s",
		m.ContractID, m.Position, m.Records, m.Priced, m.MaxSeq, m.BadRows, m.GotNet, m.WantNet)
}

// VerifyCommitted checks every contract's committed output against its
// checkpoint (its task row of kind Kind), independently of the Go engine:
// the records up to the checkpoint (position) are priced exactly once and
// none beyond, every priced row matches its record with gross − discount
// = net, and the priced nets add up to R(G) of the prefix's gross G,
// recomputed in SQL numeric arithmetic from the tiers (each net is a
// difference of cumulative values, so a prefix telescopes). Unlike Verify
// it holds while pricing is under way. Run it in one snapshot (REPEATABLE READ) so the
// checkpoints and the output agree. Records and priced rows removed by
// retention count through their sums in pruned_totals (see Verify).
func VerifyCommitted(ctx context.Context, db bun.IDB, schemaName string) ([]CommittedMismatch, error) {
	rows, err := db.QueryContext(ctx, schema.SQL(schemaName, `
		WITH totals AS (
			SELECT t.partition_key AS contract_id, t.position,
			       coalesce(sum(r.amount_minor), 0)::numeric + coalesce(max(pt.gross_minor), 0) AS g,
			       count(r.seq) + coalesce(max(pt.records), 0) AS n
			FROM {{.Schema}}.tasks t
			LEFT JOIN {{.Schema}}.pruned_totals pt ON pt.contract_id = t.partition_key
			LEFT JOIN {{.Schema}}.records r ON r.contract_id = t.partition_key AND r.seq <= t.position
			WHERE t.kind = '`+Kind+`'
			  AND NOT EXISTS (SELECT 1 FROM {{.Schema}}.generations ge
			                   WHERE ge.contract_id = t.partition_key AND ge.state = 'pricing')
			GROUP BY t.partition_key, t.position
		), bands AS (
			SELECT contract_id, threshold_minor::numeric AS t, discount_bp::numeric AS bp,
			       lead(threshold_minor::numeric) OVER (PARTITION BY contract_id ORDER BY threshold_minor) AS t_next
			FROM {{.Schema}}.tiers
		), n AS (
			SELECT tt.contract_id, tt.position, tt.n,
			       10000 * tt.g - coalesce(sum(b.bp * greatest(0, least(tt.g, coalesce(b.t_next, tt.g)) - b.t)), 0) AS nn
			FROM totals tt LEFT JOIN bands b ON b.contract_id = tt.contract_id
			GROUP BY tt.contract_id, tt.position, tt.n, tt.g
		), want AS (
			SELECT contract_id, position, n, floor(nn / 10000) AS q, nn - 10000 * floor(nn / 10000) AS r FROM n
		), got AS (
			SELECT p.contract_id, count(*) AS n, max(p.seq) AS max_seq, sum(p.net_minor)::numeric AS net,
			       count(*) FILTER (WHERE r.amount_minor IS DISTINCT FROM p.gross_minor
			                          OR p.gross_minor - p.discount_minor <> p.net_minor
			                          OR r.record_id IS DISTINCT FROM p.record_id) AS bad
			FROM {{.Schema}}.priced p LEFT JOIN {{.Schema}}.records r ON r.contract_id = p.contract_id AND r.seq = p.seq
			GROUP BY p.contract_id
		), cmp AS (
			SELECT w.contract_id, w.position, w.n, coalesce(g.n, 0) + coalesce(pt.records, 0) AS priced,
			       greatest(coalesce(g.max_seq, 0), coalesce(pt.last_seq, 0)) AS max_seq,
			       coalesce(g.bad, 0) AS bad,
			       w.q + CASE WHEN w.r > 5000 OR (w.r = 5000 AND mod(w.q, 2) = 1) THEN 1 ELSE 0 END AS want_net,
			       coalesce(g.net, 0) + coalesce(pt.net_minor, 0) AS got_net
			FROM want w LEFT JOIN got g ON g.contract_id = w.contract_id
			LEFT JOIN {{.Schema}}.pruned_totals pt ON pt.contract_id = w.contract_id
		)
		SELECT contract_id, position, n, priced, max_seq, bad, want_net::text, got_net::text
		FROM cmp
		WHERE n <> position OR priced <> position OR max_seq <> position OR bad <> 0 OR want_net <> got_net
		ORDER BY contract_id`))
	if err != nil {
		return nil, fmt.Errorf("verifying committed output: %w", err)
	}
	defer rows.Close()
	var out []CommittedMismatch
	for rows.Next() {
		var m CommittedMismatch
		if err := rows.Scan(&m.ContractID, &m.Position, &m.Records, &m.Priced, &m.MaxSeq, &m.BadRows, &m.WantNet, &m.GotNet); err != nil {
			return nil, fmt.Errorf("verifying committed output: %w", err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("verifying committed output: %w", err)
	}
	return out, nil
}
