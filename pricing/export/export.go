// Package export writes the priced records as CSV, from a Store bound
// once to a database handle and the schema of the pricing tables:
//
//	n, err := export.NewStore(db, "").WriteComplete(ctx, w)
//
// The output has the header contract_id,record_id,gross_minor,
// discount_minor,net_minor and one row per priced record, ordered by
// contract_id in byte order and then by seq, with \n line ends and minimal
// RFC 4180 quoting: a field is quoted only if it contains a comma, a double
// quote, CR or LF.
//
// The CSV is produced by PostgreSQL itself (COPY ... TO STDOUT in CSV
// format) and streamed to the writer, so memory use does not depend on the
// number of rows, and the output is one consistent snapshot. COPY's CSV
// quoting is exactly the rule above for every value the loader admits: it
// quotes a value containing the delimiter, the quote character, CR or LF,
// and otherwise only a value equal to the NULL marker (the empty string),
// which no stored contract or record id can be (ids have at least one
// character and the numbers are never empty). In particular leading or
// trailing spaces and backslashes are not quoted.
//
// The rows are read through priced's primary key, which is their order,
// never sorted: a sort of every priced row spills to disk once the table
// outgrows work_mem, and at 10^8 rows (tens of GB) reading the table and
// sorting it takes several times as long as reading it in key order. The
// planner, which assumes a heap fetch per index entry costs a random page
// read, chooses the sort once the table is large and its physical order
// looks uncorrelated with the key; but priced's rows are written a batch
// at a time, each batch consecutive rows of one contract in seq order, so
// an index scan reads the heap in runs of a batch, not a page per row.
// The export's transaction turns the planner's sort and sequential scan
// off (SET LOCAL) so that the key order is used at any size.
//
// WriteComplete writes the same, but only when pricing is complete: every
// stored record priced, and no contract whose checkpoint (or work) lies
// beyond its records, which would mean records skipped, not priced.
package export

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgxconn"
	"github.com/batonhq/baton/pricing/internal/tables"
	"github.com/batonhq/baton/pricing/pricer"
	"github.com/batonhq/baton/pricing/rerate"
)

// Header is the first line Write writes (without its line end).
const Header = "contract_id,record_id,gross_minor,discount_minor,net_minor"

// The column names produce Header through COPY's HEADER option.
const (
	selectSQL = `SELECT contract_id, record_id, gross_minor, discount_minor, net_minor
      FROM {{.Schema}}.priced
     ORDER BY contract_id COLLATE "C", seq`
	copySQL = `COPY (` + selectSQL + `) TO STDOUT WITH (FORMAT csv, HEADER true)`
)

// keyOrder makes the rest of the current transaction read priced in key
// order (see the package comment).
var keyOrder = []string{`SET LOCAL enable_sort = off`, `SET LOCAL enable_seqscan = off`}

// Store is the priced output of the pricing tables in one schema of one
// database, to be written out.
type Store struct{ t tables.Tables }

// NewStore returns the priced output of the pricing tables in PostgreSQL
// schema schemaName (empty means schema.Default, "baton") of db.
func NewStore(db *dbconn.DB, schemaName string) *Store {
	return &Store{tables.New(db, schemaName)}
}

// Write writes every priced record to w as CSV and returns the number of
// records written (not counting the header).
func (s *Store) Write(ctx context.Context, w io.Writer) (rows int64, err error) {
	conn, err := s.t.DB.Conn(ctx)
	if err != nil {
		return 0, fmt.Errorf("exporting priced records: acquiring a database connection: %w", err)
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return 0, fmt.Errorf("exporting priced records: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if rows, err = s.copyOut(ctx, conn, tx, w); err != nil {
		return 0, err
	}
	return rows, tx.Commit()
}

// WritePrevious is Write for the previous generation of every contract
// (package rerate): for a re-priced contract, the output its current
// generation replaced; for any other, its current output. Same format and
// order. The rows of a re-priced contract are sorted, not read in key
// order.
func (s *Store) WritePrevious(ctx context.Context, w io.Writer) (rows int64, err error) {
	return s.writeGeneration(ctx, w, "the previous generation", rerate.PreviousSQL)
}

// WritePreview is Write for the previews waiting for a decision (package
// rerate): for a contract with one, the preview's output as far as it is
// priced; for any other, its current output. Same format and order.
func (s *Store) WritePreview(ctx context.Context, w io.Writer) (rows int64, err error) {
	return s.writeGeneration(ctx, w, "the previews", rerate.PreviewSQL)
}

// writeGeneration writes the rows query selects, in one snapshot.
func (s *Store) writeGeneration(ctx context.Context, w io.Writer, what, query string) (rows int64, err error) {
	conn, err := s.t.DB.Conn(ctx)
	if err != nil {
		return 0, fmt.Errorf("exporting %s: acquiring a database connection: %w", what, err)
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return 0, fmt.Errorf("exporting %s: %w", what, err)
	}
	defer func() { _ = tx.Rollback() }()
	if rows, err = s.copyQuery(ctx, conn, `COPY (`+query+`) TO STDOUT WITH (FORMAT csv, HEADER true)`, w); err != nil {
		return 0, err
	}
	return rows, tx.Commit()
}

// copyOut streams the priced records over conn, in its transaction tx, to
// w.
func (s *Store) copyOut(ctx context.Context, conn bun.Conn, tx bun.Tx, w io.Writer) (rows int64, err error) {
	for _, q := range keyOrder {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return 0, fmt.Errorf("exporting priced records: %w", err)
		}
	}
	return s.copyQuery(ctx, conn, copySQL, w)
}

// copyQuery streams the CSV of the COPY statement q over conn to w.
func (s *Store) copyQuery(ctx context.Context, conn bun.Conn, q string, w io.Writer) (rows int64, err error) {
	bw := bufio.NewWriterSize(w, 1<<16)
	err = pgxconn.Raw(conn.Conn, func(pc *pgx.Conn) error {
		tag, err := pc.PgConn().CopyTo(ctx, bw, s.t.SQL(q))
		if err != nil {
			return err
		}
		rows = tag.RowsAffected()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("exporting priced records: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return 0, fmt.Errorf("exporting priced records: writing: %w", err)
	}
	return rows, nil
}

// ErrIncomplete is returned by WriteComplete when pricing is not complete:
// some records are not priced yet, or some contract is inconsistent.
var ErrIncomplete = errors.New("pricing is not complete")

// IncompleteError is WriteComplete's error (it wraps ErrIncomplete): what
// pricer.Store.CheckProgress found. Nothing was written.
type IncompleteError struct{ Progress pricer.Progress }

func (e *IncompleteError) Error() string {
	var parts []string
	if n := len(e.Progress.Inconsistent); n > 0 {
		list := make([]string, 0, min(n, 5))
		for _, c := range e.Progress.Inconsistent[:min(n, 5)] {
			list = append(list, c.String())
		}
		more := ""
		if n > 5 {
			more = fmt.Sprintf("; and %d more", n-5)
		}
		parts = append(parts, fmt.Sprintf("%d inconsistent contract(s): %s%s", n, strings.Join(list, "; "), more))
	}
	if e.Progress.Unpriced > 0 {
		parts = append(parts, fmt.Sprintf("%d records are not priced yet", e.Progress.Unpriced))
	}
	return "exporting priced records: " + strings.Join(parts, "; ")
}

func (e *IncompleteError) Unwrap() error { return ErrIncomplete }

// WriteComplete is Write for a complete pricing only: in one snapshot
// (REPEATABLE READ), it checks pricer.Store.CheckProgress and returns an
// *IncompleteError, having written nothing, if a record is not priced yet
// or a contract is inconsistent (its checkpoint or work beyond its
// records), then writes every priced record and checks that they are as
// many as the checkpoints cover (an error wrapping ErrIncomplete
// otherwise, after writing them).
func (s *Store) WriteComplete(ctx context.Context, w io.Writer) (rows int64, err error) {
	conn, err := s.t.DB.Conn(ctx)
	if err != nil {
		return 0, fmt.Errorf("exporting priced records: acquiring a database connection: %w", err)
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return 0, fmt.Errorf("exporting priced records: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	p, err := pricer.NewStore(s.t.DB, s.t.Schema).CheckProgressTx(ctx, tx)
	if err != nil {
		return 0, fmt.Errorf("exporting priced records: %w", err)
	}
	if !p.Complete() {
		return 0, &IncompleteError{Progress: p}
	}
	if rows, err = s.copyOut(ctx, conn, tx, w); err != nil {
		return 0, err
	}
	if rows != p.Priced {
		return rows, fmt.Errorf("exporting priced records: %w: %d priced records exported, but the checkpoints of the %d contracts cover %d records",
			ErrIncomplete, rows, p.Contracts, p.Priced)
	}
	return rows, tx.Commit()
}
