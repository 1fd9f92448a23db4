package pricer

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"
)

// CommittedMismatch is a contract whose committed output disagrees with
// the independent recomputation of its processed prefix.
type CommittedMismatch struct {
	ContractID string
	// Position is the contract's processed prefix: records up to it are
	// all priced (partition_progress.done_through). For a contract never
	// split into segments it is its checkpoint; for a split one, the
	// least of its checkpoint and the positions of its segments not
	// caught up.
	Position int64
	Records  int64  // records with seq <= Position
	Priced   int64  // priced rows with seq <= Position
	MaxSeq   int64  // highest priced seq up to Position
	BadRows  int64  // priced rows whose gross differs from the record or gross − discount ≠ net
	WantNet  string // R(G) of the prefix, recomputed in SQL
	GotNet   string // sum of the priced nets up to Position
	// PricedAfter is the priced rows past Position, and ProcessedAfter
	// the records past it that the checkpoints say are priced (by
	// segments that finished or moved on, and by the contract's own row
	// past its segments): they differ when a segment's output is missing
	// or there is output nothing accounts for. Both are 0 for a contract
	// never split.
	PricedAfter, ProcessedAfter int64
}

func (m CommittedMismatch) String() string {
	s := fmt.Sprintf("contract %s: processed through checkpoint %d, %d records up to it, %d priced (up to seq %d), %d bad rows; net %s, recomputed %s",
		m.ContractID, m.Position, m.Records, m.Priced, m.MaxSeq, m.BadRows, m.GotNet, m.WantNet)
	if m.PricedAfter != m.ProcessedAfter {
		s += fmt.Sprintf("; %d priced rows after it, where the checkpoints account for %d", m.PricedAfter, m.ProcessedAfter)
	}
	return s
}

// VerifyCommitted checks every contract's committed output against its
// checkpoints (its task row of kind Kind and the rows of its segments),
// independently of the Go engine: the records of the processed prefix
// (partition_progress.done_through; the checkpoint of a contract never
// split) are priced exactly once, every priced row matches its record
// with gross − discount = net, the priced nets of the prefix add up to
// R(G) of the prefix's gross G, recomputed in SQL numeric arithmetic from
// the tiers (each net is a difference of cumulative values, so a prefix
// telescopes), and past the prefix there are exactly as many priced rows
// as the checkpoints of the contract's row and segments say are priced
// (none for a contract never split). Unlike Verify it holds while pricing
// is under way. Run it in one snapshot (REPEATABLE READ) so the
// checkpoints and the output agree. Records and priced rows removed by
// retention count through their sums in pruned_totals (see Verify).
// Segment rows are not contracts: they are checked as part of theirs.
func (s *Store) VerifyCommitted(ctx context.Context) ([]CommittedMismatch, error) {
	return s.verifyCommitted(ctx, s.t.DB)
}

// VerifyCommittedTx is VerifyCommitted in tx, which should be REPEATABLE
// READ (see VerifyCommitted).
func (s *Store) VerifyCommittedTx(ctx context.Context, tx bun.Tx) ([]CommittedMismatch, error) {
	return s.verifyCommitted(ctx, tx)
}

func (s *Store) verifyCommitted(ctx context.Context, db bun.IDB) ([]CommittedMismatch, error) {
	// checked compares every priced row with its record on its own
	// (MATERIALIZED), as Verify does, in one join of the two sets. Joined
	// to prog as well, the planner takes the few progress rows as the
	// driving side and looks each priced row's record up through the
	// records view, which can only find a contract's chunks, not the seq:
	// every priced row then unnests all its contract's chunks, quadratic
	// in a contract's records (hours for 60,000 records in segments,
	// against about a second).
	rows, err := db.QueryContext(ctx, s.t.SQL(`
		WITH prog AS (
			SELECT t.partition_key AS contract_id, t.done_through, t.position,
			       t.available - t.pending - t.done_through AS after
			FROM {{.Schema}}.partition_progress t
			WHERE t.kind = '`+Kind+`'
			  AND NOT EXISTS (SELECT 1 FROM {{.Schema}}.generations ge
			                   WHERE ge.contract_id = t.partition_key AND ge.state IN ('pricing', 'preview'))
		), totals AS (
			SELECT t.contract_id, t.done_through, t.position, t.after,
			       coalesce(sum(r.amount_minor), 0)::numeric + coalesce(max(pt.gross_minor), 0) AS g,
			       count(r.seq) + coalesce(max(pt.records), 0) AS n
			FROM prog t
			LEFT JOIN {{.Schema}}.pruned_totals pt ON pt.contract_id = t.contract_id
			LEFT JOIN {{.Schema}}.records r ON r.contract_id = t.contract_id AND r.seq <= t.done_through
			GROUP BY t.contract_id, t.done_through, t.position, t.after
		), bands AS (
			SELECT contract_id, threshold_minor::numeric AS t, discount_bp::numeric AS bp,
			       lead(threshold_minor::numeric) OVER (PARTITION BY contract_id ORDER BY threshold_minor) AS t_next
			FROM {{.Schema}}.tiers
		), n AS (
			SELECT tt.contract_id, tt.done_through, tt.position, tt.after, tt.n,
			       10000 * tt.g - coalesce(sum(b.bp * greatest(0, least(tt.g, coalesce(b.t_next, tt.g)) - b.t)), 0) AS nn
			FROM totals tt LEFT JOIN bands b ON b.contract_id = tt.contract_id
			GROUP BY tt.contract_id, tt.done_through, tt.position, tt.after, tt.n, tt.g
		), want AS (
			SELECT contract_id, done_through, position, after, n, floor(nn / 10000) AS q, nn - 10000 * floor(nn / 10000) AS r FROM n
		), checked AS MATERIALIZED (
			SELECT p.contract_id,
			       count(*) FILTER (WHERE r.amount_minor IS DISTINCT FROM p.gross_minor
			                          OR p.gross_minor - p.discount_minor <> p.net_minor
			                          OR r.record_id IS DISTINCT FROM p.record_id) AS bad
			FROM {{.Schema}}.priced p LEFT JOIN {{.Schema}}.records r ON r.contract_id = p.contract_id AND r.seq = p.seq
			GROUP BY p.contract_id
		), got AS (
			SELECT p.contract_id,
			       count(*) FILTER (WHERE p.seq <= t.done_through) AS n,
			       max(p.seq) FILTER (WHERE p.seq <= t.done_through) AS max_seq,
			       sum(p.net_minor) FILTER (WHERE p.seq <= t.done_through)::numeric AS net,
			       count(*) FILTER (WHERE p.seq > t.done_through) AS after,
			       max(p.seq) AS last_seq
			FROM {{.Schema}}.priced p
			JOIN prog t ON t.contract_id = p.contract_id
			GROUP BY p.contract_id
		), cmp AS (
			SELECT w.contract_id, w.done_through, w.position, w.after AS want_after, w.n,
			       coalesce(g.n, 0) + coalesce(pt.records, 0) AS priced,
			       greatest(coalesce(g.max_seq, 0), coalesce(pt.last_seq, 0)) AS max_seq,
			       coalesce(g.after, 0) AS after, coalesce(g.last_seq, 0) AS last_seq,
			       coalesce(c.bad, 0) AS bad,
			       w.q + CASE WHEN w.r > 5000 OR (w.r = 5000 AND mod(w.q, 2) = 1) THEN 1 ELSE 0 END AS want_net,
			       coalesce(g.net, 0) + coalesce(pt.net_minor, 0) AS got_net
			FROM want w LEFT JOIN got g ON g.contract_id = w.contract_id
			LEFT JOIN checked c ON c.contract_id = w.contract_id
			LEFT JOIN {{.Schema}}.pruned_totals pt ON pt.contract_id = w.contract_id
		)
		SELECT contract_id, done_through, n, priced, max_seq, bad, want_net::text, got_net::text, after, want_after
		FROM cmp
		WHERE n <> done_through OR priced <> done_through OR max_seq <> done_through OR bad <> 0 OR want_net <> got_net
		   OR after <> want_after OR last_seq > position
		ORDER BY contract_id`))
	if err != nil {
		return nil, fmt.Errorf("verifying committed output: %w", err)
	}
	defer rows.Close()
	var out []CommittedMismatch
	for rows.Next() {
		var m CommittedMismatch
		if err := rows.Scan(&m.ContractID, &m.Position, &m.Records, &m.Priced, &m.MaxSeq, &m.BadRows, &m.WantNet, &m.GotNet,
			&m.PricedAfter, &m.ProcessedAfter); err != nil {
			return nil, fmt.Errorf("verifying committed output: %w", err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("verifying committed output: %w", err)
	}
	return out, nil
}
