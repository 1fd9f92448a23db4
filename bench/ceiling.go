package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"

	"github.com/batonhq/baton/internal/pgxconn"
)

// The ceiling: the database prices every record itself in ONE statement,
// in exact numeric arithmetic. Two formulations of the same mathematics are
// timed and the faster correct one is the ceiling:
//
//   - direct: the formula as stated. A window sum gives each record's
//     cumulative gross G1 (G0 = G1 − amount); the tier bands it overlaps
//     give D(G) = Σ bp_i·max(0, min(G, t_{i+1}) − t_i); N = 10000·G − D;
//     R = N/10000 rounded half to even; net = R(G1) − R(G0). Bands at or
//     above G1 add nothing, so the join skips them.
//   - telescoped: D is piecewise linear with slope bp_k on band k, so
//     D(G) = bp_k·G − Σ_{i≤k} (bp_i − bp_{i−1})·t_i for the band k holding
//     G: one band per record instead of all of them. The band is carried
//     forward by a running max over records and band starts merged in
//     cumulative-gross order, and R(G0) of a record is R(G1) of the one
//     before it (lag).
const ceilingDirectSQL = `
INSERT INTO %[1]s (contract_id, seq, record_id, gross_minor, discount_minor, net_minor, claim_version, priced_by)
WITH bands AS (
    SELECT contract_id, threshold_minor::numeric AS t, discount_bp::numeric AS bp,
           lead(threshold_minor::numeric) OVER (PARTITION BY contract_id ORDER BY threshold_minor) AS t_next
    FROM baton.tiers
), cum AS (
    SELECT contract_id, seq, record_id, amount_minor,
           (sum(amount_minor) OVER (PARTITION BY contract_id ORDER BY seq))::numeric AS g1
    FROM baton.records
), n AS (
    SELECT c.contract_id, c.seq, c.record_id, c.amount_minor,
           10000 * c.g1 - coalesce(sum(b.bp * greatest(0, least(c.g1, coalesce(b.t_next, c.g1)) - b.t)), 0) AS n1,
           10000 * (c.g1 - c.amount_minor)
             - coalesce(sum(b.bp * greatest(0, least(c.g1 - c.amount_minor, coalesce(b.t_next, c.g1)) - b.t)), 0) AS n0
    FROM cum c LEFT JOIN bands b ON b.contract_id = c.contract_id AND b.t < c.g1
    GROUP BY c.contract_id, c.seq, c.record_id, c.amount_minor, c.g1
), r AS (
    SELECT contract_id, seq, record_id, amount_minor, %[2]s AS r1, %[3]s AS r0
    FROM n
)
SELECT contract_id, seq, record_id, amount_minor, amount_minor - (r1 - r0), r1 - r0, 0, 'sql-ceiling'
FROM r`

const ceilingTelescopedSQL = `
INSERT INTO %[1]s (contract_id, seq, record_id, gross_minor, discount_minor, net_minor, claim_version, priced_by)
WITH d AS (
    SELECT contract_id, threshold_minor::numeric AS t, discount_bp::numeric AS bp,
           (discount_bp - coalesce(lag(discount_bp) OVER (PARTITION BY contract_id ORDER BY threshold_minor), 0))::numeric
             * threshold_minor::numeric AS dbt
    FROM baton.tiers
), b AS (
    SELECT contract_id, t, bp, sum(dbt) OVER (PARTITION BY contract_id ORDER BY t) AS bsum FROM d
), cum AS (
    SELECT contract_id, seq, record_id, amount_minor,
           (sum(amount_minor) OVER (PARTITION BY contract_id ORDER BY seq))::numeric AS g
    FROM baton.records
), ev AS (
    SELECT contract_id, g, 1 AS kind, seq, record_id, amount_minor, NULL::numeric[] AS band FROM cum
    UNION ALL
    SELECT contract_id, t, 0, NULL, NULL, NULL, ARRAY[t, bp, bsum] FROM b
), f AS (
    SELECT contract_id, seq, record_id, amount_minor, g, kind,
           max(band) OVER (PARTITION BY contract_id ORDER BY g, kind ROWS UNBOUNDED PRECEDING) AS cur
    FROM ev
), n AS (
    SELECT contract_id, seq, record_id, amount_minor, g, 10000 * g - coalesce(cur[2] * g - cur[3], 0) AS n1
    FROM f WHERE kind = 1
), r AS (
    SELECT contract_id, seq, record_id, amount_minor, g, %[2]s AS r1
    FROM n
), o AS (
    SELECT contract_id, seq, record_id, amount_minor,
           r1 - lag(r1, 1, 0::numeric) OVER (PARTITION BY contract_id ORDER BY g) AS net
    FROM r
)
SELECT contract_id, seq, record_id, amount_minor, amount_minor - net, net, 0, 'sql-ceiling' FROM o`

// ceilingVariants are the formulations timed, in order.
var ceilingVariants = []string{"direct", "telescoped"}

// roundHalfEven renders R(n) = n/10000 rounded half to even, for numeric
// n ≥ 0.
func roundHalfEven(n string) string {
	return fmt.Sprintf("(div(%[1]s, 10000) + CASE WHEN mod(%[1]s, 10000) > 5000 OR (mod(%[1]s, 10000) = 5000 AND mod(div(%[1]s, 10000), 2) = 1) THEN 1 ELSE 0 END)", n)
}

func ceilingStatement(table, variant string) string {
	if variant == "telescoped" {
		return fmt.Sprintf(ceilingTelescopedSQL, table, roundHalfEven("n1"))
	}
	return fmt.Sprintf(ceilingDirectSQL, table, roundHalfEven("n1"), roundHalfEven("n0"))
}

// ceilingResult is one timing of the single-statement ceiling.
type ceilingResult struct {
	Variant string  `json:"variant"`
	Rows    int64   `json:"rows"`
	Seconds float64 `json:"seconds"`
	PerSec  float64 `json:"records_per_s"`
	CPU     cpuUse  `json:"cpu"`
	Digest  string  `json:"digest"`
	Matches bool    `json:"matches_baton"`
}

// runCeiling times the ceiling statement into a fresh table.
func (e *env) runCeiling(ctx context.Context, db *bun.DB, variant string) (ceilingResult, error) {
	r := ceilingResult{Variant: variant}
	table := "ceiling_" + variant
	if _, err := db.ExecContext(ctx, fmt.Sprintf(`CREATE TABLE %[1]s (LIKE baton.priced_rows INCLUDING ALL);
		ALTER TABLE %[1]s ALTER COLUMN generation SET DEFAULT 1`, table)); err != nil {
		return r, fmt.Errorf("creating %s: %w", table, err)
	}
	e.checkpoint(ctx)
	m := startCPU(e.cpu)
	start := time.Now()
	res, err := db.ExecContext(ctx, ceilingStatement(table, variant))
	if err != nil {
		return r, fmt.Errorf("running the %s ceiling statement: %w", variant, err)
	}
	r.Seconds = time.Since(start).Seconds()
	r.CPU = m.stop()
	r.Rows, _ = res.RowsAffected()
	r.PerSec = float64(r.Rows) / r.Seconds
	if r.Digest, err = outputDigest(ctx, db, table); err != nil {
		return r, err
	}
	return r, nil
}

// outputDigest is an order-independent fingerprint of a priced table, so
// outputs in different databases can be compared.
func outputDigest(ctx context.Context, db bun.IDB, table string) (string, error) {
	var d string
	err := db.QueryRowContext(ctx, fmt.Sprintf(`
		SELECT count(*) || ':' || coalesce(sum(net_minor), 0) || ':' ||
		       md5(coalesce(string_agg(contract_id || '/' || seq || '/' || record_id || '/' || gross_minor || '/' ||
		                               discount_minor || '/' || net_minor, ',' ORDER BY contract_id, seq), ''))
		FROM %s`, table)).Scan(&d)
	if err != nil {
		return "", fmt.Errorf("fingerprinting %s: %w", table, err)
	}
	return d, nil
}

// copyResult is one timing of COPY of the same output rows.
type copyResult struct {
	Rows    int64   `json:"rows"`
	Seconds float64 `json:"seconds"`
	PerSec  float64 `json:"records_per_s"`
	CPU     cpuUse  `json:"cpu"`
}

// runCopy reads the rows of source into memory, then times COPY (binary,
// through pgx) of them into a fresh table shaped like priced, with its
// primary key.
func (e *env) runCopy(ctx context.Context, db *bun.DB, source string) (copyResult, error) {
	var r copyResult
	rows, err := db.QueryContext(ctx, fmt.Sprintf(`
		SELECT contract_id, seq, record_id, gross_minor, discount_minor, net_minor, claim_version, priced_by
		FROM %s ORDER BY contract_id, seq`, source))
	if err != nil {
		return r, fmt.Errorf("reading rows to copy: %w", err)
	}
	var data [][]any
	for rows.Next() {
		var c, rid, by string
		var seq, g, d, n, v int64
		if err := rows.Scan(&c, &seq, &rid, &g, &d, &n, &v, &by); err != nil {
			rows.Close()
			return r, fmt.Errorf("reading rows to copy: %w", err)
		}
		data = append(data, []any{c, seq, rid, g, d, n, v, by})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return r, fmt.Errorf("reading rows to copy: %w", err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE copy_priced (LIKE baton.priced_rows INCLUDING ALL);
		ALTER TABLE copy_priced ALTER COLUMN generation SET DEFAULT 1`); err != nil {
		return r, fmt.Errorf("creating copy_priced: %w", err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return r, err
	}
	defer conn.Close()
	e.checkpoint(ctx)
	m := startCPU(e.cpu)
	start := time.Now()
	err = pgxconn.Raw(conn.Conn, func(pc *pgx.Conn) error {
		n, err := pc.CopyFrom(ctx, pgx.Identifier{"copy_priced"},
			[]string{"contract_id", "seq", "record_id", "gross_minor", "discount_minor", "net_minor", "claim_version", "priced_by"},
			pgx.CopyFromRows(data))
		r.Rows = n
		return err
	})
	if err != nil {
		return r, fmt.Errorf("copying %d rows: %w", len(data), err)
	}
	r.Seconds = time.Since(start).Seconds()
	r.CPU = m.stop()
	r.PerSec = float64(r.Rows) / r.Seconds
	return r, nil
}

// explainCeiling returns the plan of the ceiling statement, for the report.
func explainCeiling(ctx context.Context, db bun.IDB, variant string) string {
	rows, err := db.QueryContext(ctx, "EXPLAIN "+ceilingStatement("ceiling_"+variant, variant))
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var l string
		_ = rows.Scan(&l)
		b.WriteString(l + "\n")
	}
	return b.String()
}
