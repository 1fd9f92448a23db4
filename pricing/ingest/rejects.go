package ingest

import (
	"bufio"
	"context"
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

const sqlCountRejected = `
SELECT (SELECT count(*) FROM load_tiers WHERE err IS NOT NULL) + (SELECT count(*) FROM load_records WHERE err IS NOT NULL)`

// sqlRejected lists the invalid rows, tiers first, in line order; c1..c3
// rebuild the row when raw is NULL.
const sqlRejected = `
SELECT f, line, err, raw, c1, c2, c3 FROM (
    SELECT 0 AS f, line, err, raw, contract_id AS c1, threshold_minor::text AS c2, discount_bp::text AS c3
      FROM load_tiers WHERE err IS NOT NULL
    UNION ALL
    SELECT 1, line, err, raw, contract_id, record_id, amount_minor::text
      FROM load_records WHERE err IS NOT NULL
) e ORDER BY f, line`

// rejected is one row of sqlRejected.
type rejected struct {
	file   int
	line   int64
	reason string
	raw    *string
	c      [3]*string
}

func (r *rejected) scan(rows pgx.Rows) error {
	return rows.Scan(&r.file, &r.line, &r.reason, &r.raw, &r.c[0], &r.c[1], &r.c[2])
}

// row returns the original row as CSV.
func (r *rejected) row() string {
	if r.raw != nil {
		return *r.raw
	}
	fields := make([]string, 3)
	for i, p := range r.c {
		if p != nil {
			fields[i] = *p
		}
	}
	return joinCSV(fields)
}

func (l *loader) fileName(f int) string {
	if f == 0 {
		return l.opts.TiersPath
	}
	return l.opts.RecordsPath
}

func (l *loader) listErrors(ctx context.Context, tx pgx.Tx) (*InvalidInputError, error) {
	ie := &InvalidInputError{Total: l.rep.RowsRejected}
	rows, err := tx.Query(ctx, sqlRejected+" LIMIT $1", l.opts.MaxListed)
	if err != nil {
		return nil, fmt.Errorf("loading: listing invalid rows: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var r rejected
		if err := r.scan(rows); err != nil {
			return nil, fmt.Errorf("loading: listing invalid rows: %w", err)
		}
		fields, _ := csv.NewReader(strings.NewReader(r.row())).Read()
		ie.Errors = append(ie.Errors, LineError{File: l.fileName(r.file), Line: r.line, Reason: r.reason, Row: fields})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("loading: listing invalid rows: %w", err)
	}
	return ie, nil
}

// writeRejects writes the reject file under a temporary name next to
// RejectPath and returns that name; it is renamed once the load commits.
func (l *loader) writeRejects(ctx context.Context, tx pgx.Tx) (string, error) {
	path := l.opts.RejectPath
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return "", fmt.Errorf("writing reject file: %w", err)
	}
	tmp := f.Name()
	if err := l.writeRejectRows(ctx, tx, f); err != nil {
		f.Close()
		os.Remove(tmp)
		return "", fmt.Errorf("writing reject file %s: %w", path, err)
	}
	return tmp, nil
}

func (l *loader) writeRejectRows(ctx context.Context, tx pgx.Tx, f *os.File) error {
	bw := bufio.NewWriterSize(f, 1<<16)
	w := csv.NewWriter(bw)
	if err := w.Write([]string{"file", "line", "reason", "row"}); err != nil {
		return err
	}
	rows, err := tx.Query(ctx, sqlRejected)
	if err != nil {
		return err
	}
	defer rows.Close()
	rec := make([]string, 4)
	for rows.Next() {
		var r rejected
		if err := r.scan(rows); err != nil {
			return err
		}
		rec[0], rec[1], rec[2], rec[3] = l.fileName(r.file), strconv.FormatInt(r.line, 10), r.reason, r.row()
		if err := w.Write(rec); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}
