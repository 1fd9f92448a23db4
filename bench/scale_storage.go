package main

import (
	"context"
	"crypto/md5"
	"database/sql"
	"encoding/hex"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"

	"github.com/batonhq/baton/internal/pgxconn"
)

// The priced-output layouts compared by the scale scenario. priced holds
// one row per record with every column, and its primary key; together
// they are most of a priced database's bytes. Each alternative is built
// from the same priced rows in schema scale_alt, written with one binary
// COPY into the empty table (keys in place, as the workers write), and
// read through a view with priced's per-row shape (contract_id, seq,
// record_id, gross_minor, discount_minor, net_minor), so that a SQL reader
// of priced would only change the name it reads. Nothing of baton's schema
// changes.

// storageResult compares the layouts on one run's output.
type storageResult struct {
	Records   int64          `json:"records"`
	Contracts int            `json:"contracts"`
	Lookups   int            `json:"lookups"`
	Layouts   []layoutResult `json:"layouts"`
	Skipped   []string       `json:"skipped,omitempty"`
}

// layoutResult is one layout's bytes, write time and read times.
type layoutResult struct {
	Name        string  `json:"name"`
	Description string  `json:"description"`
	Heap        int64   `json:"heap_bytes"`
	Toast       int64   `json:"toast_bytes"`
	Index       int64   `json:"index_bytes"`
	PerRecord   float64 `json:"bytes_per_record"`
	// WriteSeconds is COPY (binary) of the layout's rows into its empty
	// table, keys in place.
	WriteSeconds float64 `json:"write_s"`
	// ExportSeconds is COPY (SELECT export's columns FROM the view ORDER
	// BY contract_id, seq) TO STDOUT, as `worker export` reads.
	ExportSeconds float64 `json:"export_read_s"`
	// SumSeconds is SELECT count(*), sum(net_minor) FROM the view.
	SumSeconds float64 `json:"sum_read_s"`
	// LookupMs is the mean time to read one contract's rows in seq order,
	// over Lookups contracts.
	LookupMs float64 `json:"lookup_ms"`
	Lookups  int     `json:"lookups"`
	// Digest is the export read's md5; Matches says it equals priced's.
	Digest  string `json:"digest"`
	Matches bool   `json:"matches"`
	// ExportPlan is EXPLAIN (ANALYZE, BUFFERS) of the export read.
	ExportPlan string `json:"export_plan"`
}

func (l layoutResult) total() int64 { return l.Heap + l.Toast + l.Index }

// layout is one way of storing the priced output.
type layout struct {
	name, description string
	// table creates scale_alt.<name>; view creates scale_alt.<name>_v.
	table, view string
	// source selects the table's rows, in its column order, from baton's.
	source string
	// noKey: nothing finds one contract's rows but a scan of the whole
	// table, so only noKeyLookups contracts are read one by one.
	noKey bool
}

// noKeyLookups is how many contracts are read one by one from a layout
// without a key (each read scans the whole table).
const noKeyLookups = 5

const (
	pricedRowView = `SELECT contract_id, seq, record_id, gross_minor, discount_minor, net_minor FROM scale_alt.%[1]s`
	narrowTable   = `CREATE TABLE scale_alt.%[1]s (contract_id text COLLATE "C" NOT NULL, seq bigint NOT NULL,
		discount_minor bigint NOT NULL, claim_version bigint NOT NULL %[2]s)`
	narrowView = `SELECT p.contract_id, p.seq, r.record_id, r.amount_minor AS gross_minor, p.discount_minor,
		r.amount_minor - p.discount_minor AS net_minor
		FROM scale_alt.%[1]s p JOIN baton.records r ON r.contract_id = p.contract_id AND r.seq = p.seq`
	narrowSource   = `SELECT contract_id, seq, discount_minor, claim_version FROM baton.priced ORDER BY contract_id, seq`
	discountsTable = `CREATE TABLE scale_alt.%[1]s (contract_id text COLLATE "C" NOT NULL, first_seq bigint NOT NULL,
		last_seq bigint NOT NULL, claim_version bigint NOT NULL, priced_by text NOT NULL, priced_at timestamptz NOT NULL,
		discounts bigint[] %[2]s NOT NULL, PRIMARY KEY (contract_id, first_seq))`
	discountsView = `SELECT c.contract_id, c.first_seq + u.i - 1 AS seq, u.record_id, u.amount AS gross_minor,
		u.discount AS discount_minor, u.amount - u.discount AS net_minor
		FROM scale_alt.%[1]s c
		JOIN baton.record_chunks rc ON rc.contract_id = c.contract_id AND rc.first_seq = c.first_seq
		CROSS JOIN LATERAL unnest(rc.record_ids, rc.amounts, c.discounts) WITH ORDINALITY AS u (record_id, amount, discount, i)`
	discountsSource = `SELECT rc.contract_id, rc.first_seq, rc.last_seq, max(p.claim_version), min(p.priced_by), min(p.priced_at),
		array_agg(p.discount_minor ORDER BY p.seq)
		FROM baton.record_chunks rc
		JOIN baton.priced p ON p.contract_id = rc.contract_id AND p.seq BETWEEN rc.first_seq AND rc.last_seq
		GROUP BY rc.contract_id, rc.first_seq, rc.last_seq ORDER BY 1, 2`
)

var layouts = []layout{
	{name: "row", description: "priced as it is: one row per record, every column, primary key (contract_id, seq)",
		table: `CREATE TABLE scale_alt.row (LIKE baton.priced_rows INCLUDING ALL)`, view: pricedRowView,
		source: `SELECT * FROM baton.priced ORDER BY contract_id, seq`},
	{name: "row_nokey", description: "the same rows without the primary key",
		table: `CREATE TABLE scale_alt.row_nokey (LIKE baton.priced_rows INCLUDING DEFAULTS)`, view: pricedRowView,
		source: `SELECT * FROM baton.priced ORDER BY contract_id, seq`, noKey: true},
	{name: "narrow", description: "one row per record of (contract_id, seq, discount_minor, claim_version), primary key (contract_id, seq); record_id and gross from records, net = gross − discount",
		table: fmt.Sprintf(narrowTable, "narrow", `, PRIMARY KEY (contract_id, seq)`), view: narrowView, source: narrowSource},
	{name: "narrow_nokey", description: "the narrow rows without the primary key",
		table: fmt.Sprintf(narrowTable, "narrow_nokey", ""), view: narrowView, source: narrowSource, noKey: true},
	{name: "chunk", description: "self-contained chunks of up to 1,024 records like record_chunks: (contract_id, first_seq, last_seq, claim_version, priced_by, priced_at, record_ids[], gross[], discounts[], nets[]), primary key (contract_id, first_seq), arrays stored out of line uncompressed",
		table: `CREATE TABLE scale_alt.chunk (contract_id text COLLATE "C" NOT NULL, first_seq bigint NOT NULL, last_seq bigint NOT NULL,
			claim_version bigint NOT NULL, priced_by text NOT NULL, priced_at timestamptz NOT NULL,
			record_ids text[] COLLATE "C" NOT NULL, gross bigint[] NOT NULL, discounts bigint[] NOT NULL, nets bigint[] NOT NULL,
			PRIMARY KEY (contract_id, first_seq));
			ALTER TABLE scale_alt.chunk ALTER COLUMN record_ids SET STORAGE EXTERNAL, ALTER COLUMN gross SET STORAGE EXTERNAL,
			                            ALTER COLUMN discounts SET STORAGE EXTERNAL, ALTER COLUMN nets SET STORAGE EXTERNAL`,
		view: `SELECT c.contract_id, c.first_seq + u.i - 1 AS seq, u.record_id, u.gross_minor, u.discount_minor, u.net_minor
			FROM scale_alt.chunk c
			CROSS JOIN LATERAL unnest(c.record_ids, c.gross, c.discounts, c.nets) WITH ORDINALITY AS u (record_id, gross_minor, discount_minor, net_minor, i)`,
		source: `SELECT contract_id, min(seq), max(seq), max(claim_version), min(priced_by), min(priced_at),
			array_agg(record_id ORDER BY seq), array_agg(gross_minor ORDER BY seq), array_agg(discount_minor ORDER BY seq), array_agg(net_minor ORDER BY seq)
			FROM baton.priced GROUP BY contract_id, (seq - 1) / 1024 ORDER BY 1, 2`},
	{name: "discounts", description: "one row per record chunk (same first_seq) with only the discounts as an array, stored out of line uncompressed; record_id and gross from the record chunk",
		table: fmt.Sprintf(discountsTable, "discounts", "") + `; ALTER TABLE scale_alt.discounts ALTER COLUMN discounts SET STORAGE EXTERNAL`,
		view:  discountsView, source: discountsSource},
	{name: "discounts_pglz", description: "the discount chunks compressed with pglz (PostgreSQL's default)",
		table: fmt.Sprintf(discountsTable, "discounts_pglz", "COMPRESSION pglz"), view: discountsView, source: discountsSource},
	{name: "discounts_lz4", description: "the discount chunks compressed with lz4",
		table: fmt.Sprintf(discountsTable, "discounts_lz4", "COMPRESSION lz4"), view: discountsView, source: discountsSource},
}

// measureStorage builds every layout from db's priced rows (n records) and
// measures it.
func (e *env) measureStorage(ctx context.Context, db *bun.DB, n int64, lookups int) (*storageResult, error) {
	st := &storageResult{Records: n, Lookups: lookups}
	if _, err := db.ExecContext(ctx, `DROP SCHEMA IF EXISTS scale_alt CASCADE; CREATE SCHEMA scale_alt`); err != nil {
		return st, fmt.Errorf("creating schema scale_alt: %w", err)
	}
	defer db.ExecContext(context.WithoutCancel(ctx), `DROP SCHEMA IF EXISTS scale_alt CASCADE`)
	var ids []string
	if err := db.NewRaw(`SELECT contract_id FROM baton.contracts ORDER BY contract_id`).Scan(ctx, &ids); err != nil {
		return st, fmt.Errorf("listing contracts: %w", err)
	}
	st.Contracts = len(ids)
	sample := spread(ids, lookups)
	dir := filepath.Join(e.tmp, "scale-storage")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return st, err
	}
	defer os.RemoveAll(dir)
	conn, err := db.Conn(ctx)
	if err != nil {
		return st, err
	}
	defer conn.Close()
	for _, l := range layouts {
		log.Printf("scale: priced layout %s", l.name)
		r, err := e.measureLayout(ctx, db, conn.Conn, dir, l, n, sample)
		if err != nil {
			if strings.Contains(err.Error(), "lz4") {
				st.Skipped = append(st.Skipped, fmt.Sprintf("%s: %v", l.name, err))
				log.Printf("scale: skipping layout %s: %v", l.name, err)
				continue
			}
			return st, fmt.Errorf("layout %s: %w", l.name, err)
		}
		if len(st.Layouts) > 0 {
			r.Matches = r.Digest == st.Layouts[0].Digest
		} else {
			r.Matches = true
		}
		st.Layouts = append(st.Layouts, r)
		log.Printf("scale: layout %s: %.1f bytes/record, write %.2fs, export read %.2fs, sum %.2fs, lookup %.1fms, same output %v",
			r.Name, r.PerRecord, r.WriteSeconds, r.ExportSeconds, r.SumSeconds, r.LookupMs, r.Matches)
		if !r.Matches {
			return st, fmt.Errorf("layout %s: its view's rows differ from priced's", l.name)
		}
	}
	return st, nil
}

// spread picks up to k of ids, evenly spaced.
func spread(ids []string, k int) []string {
	if k >= len(ids) {
		return ids
	}
	out := make([]string, 0, k)
	for i := range k {
		out = append(out, ids[i*len(ids)/k])
	}
	return out
}

func (e *env) measureLayout(ctx context.Context, db *bun.DB, conn *sql.Conn, dir string, l layout, n int64, sample []string) (layoutResult, error) {
	r := layoutResult{Name: l.name, Description: l.description}
	if _, err := db.ExecContext(ctx, l.table); err != nil {
		return r, fmt.Errorf("creating the table: %w", err)
	}
	if _, err := db.ExecContext(ctx, fmt.Sprintf(`CREATE VIEW scale_alt.%s_v AS `+l.view, l.name)); err != nil {
		return r, fmt.Errorf("creating the view: %w", err)
	}
	// The rows, in the table's binary COPY format (untimed).
	path := filepath.Join(dir, l.name+".bin")
	defer os.Remove(path)
	f, err := os.Create(path)
	if err != nil {
		return r, err
	}
	err = pgxconn.Raw(conn, func(pc *pgx.Conn) error {
		_, err := pc.PgConn().CopyTo(ctx, f, `COPY (`+l.source+`) TO STDOUT (FORMAT binary)`)
		return err
	})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return r, fmt.Errorf("dumping the rows: %w", err)
	}
	// The write: COPY of those rows.
	f, err = os.Open(path)
	if err != nil {
		return r, err
	}
	defer f.Close()
	e.checkpoint(ctx)
	t0 := time.Now()
	err = pgxconn.Raw(conn, func(pc *pgx.Conn) error {
		_, err := pc.PgConn().CopyFrom(ctx, f, fmt.Sprintf(`COPY scale_alt.%s FROM STDIN (FORMAT binary)`, l.name))
		return err
	})
	if err != nil {
		return r, fmt.Errorf("copying the rows in: %w", err)
	}
	r.WriteSeconds = time.Since(t0).Seconds()
	if _, err := db.ExecContext(ctx, fmt.Sprintf(`VACUUM ANALYZE scale_alt.%s`, l.name)); err != nil {
		return r, fmt.Errorf("vacuuming: %w", err)
	}
	if err := db.QueryRowContext(ctx, `
		SELECT pg_table_size(c.oid) - coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0),
		       coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0), pg_indexes_size(c.oid)
		FROM pg_class c WHERE c.oid = ?::regclass`, "scale_alt."+l.name).Scan(&r.Heap, &r.Toast, &r.Index); err != nil {
		return r, fmt.Errorf("measuring: %w", err)
	}
	r.PerRecord = bytesPerRecord(r.total(), n)
	view := "scale_alt." + l.name + "_v"

	// The reads, each the faster of two.
	best := func(fn func() error) (float64, error) {
		b := -1.0
		for range 2 {
			t0 := time.Now()
			if err := fn(); err != nil {
				return 0, err
			}
			if d := time.Since(t0).Seconds(); b < 0 || d < b {
				b = d
			}
		}
		return b, nil
	}
	r.ExportSeconds, err = best(func() error {
		h := md5.New()
		err := pgxconn.Raw(conn, func(pc *pgx.Conn) error {
			_, err := pc.PgConn().CopyTo(ctx, h, `COPY (`+exportRead(view)+`) TO STDOUT`)
			return err
		})
		r.Digest = hex.EncodeToString(h.Sum(nil))
		return err
	})
	if err != nil {
		return r, fmt.Errorf("reading as export does: %w", err)
	}
	var plan []string
	if err := db.NewRaw(`EXPLAIN (ANALYZE, BUFFERS) `+exportRead(view)).Scan(ctx, &plan); err != nil {
		return r, fmt.Errorf("explaining the export read: %w", err)
	}
	r.ExportPlan = strings.Join(plan, "\n")
	r.SumSeconds, err = best(func() error {
		var count, net int64
		return db.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(net_minor), 0) FROM `+view).Scan(&count, &net)
	})
	if err != nil {
		return r, fmt.Errorf("summing: %w", err)
	}
	if l.noKey {
		sample = sample[:min(len(sample), noKeyLookups)]
	}
	r.Lookups = len(sample)
	lookups, err := best(func() error {
		for _, id := range sample {
			rows, err := db.QueryContext(ctx, `SELECT seq, record_id, gross_minor, discount_minor, net_minor FROM `+view+
				` WHERE contract_id = ? ORDER BY seq`, id)
			if err != nil {
				return err
			}
			for rows.Next() {
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return r, fmt.Errorf("reading contracts one by one: %w", err)
	}
	if len(sample) > 0 {
		r.LookupMs = 1000 * lookups / float64(len(sample))
	}
	return r, nil
}

// exportRead is the export's query over a layout's view.
func exportRead(view string) string {
	return `SELECT contract_id, record_id, gross_minor, discount_minor, net_minor FROM ` + view + ` ORDER BY contract_id, seq`
}
