package reprice

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"

	"github.com/batonhq/baton/partition"
)

// Tx is the transaction Start runs in: a pgx one (Pgx) or a bun one (Bun).
// Its statements use $n placeholders.
type Tx interface {
	Exec(ctx context.Context, sql string, args ...any) error
	QueryRow(ctx context.Context, sql string, args ...any) Row
	// ForEachRow scans each row of the query's result into scans and
	// calls fn after each.
	ForEachRow(ctx context.Context, sql string, args []any, scans []any, fn func() error) error
	// Rewind rewinds partitions of s in the transaction.
	Rewind(ctx context.Context, s *partition.Store, rw []partition.Rewind) ([]partition.Rewound, error)
}

// Row is a row read by Tx.QueryRow.
type Row interface{ Scan(dest ...any) error }

// Pgx is tx as a Tx.
func Pgx(tx pgx.Tx) Tx { return pgxTx{tx} }

type pgxTx struct{ tx pgx.Tx }

func (t pgxTx) Exec(ctx context.Context, sql string, args ...any) error {
	_, err := t.tx.Exec(ctx, sql, args...)
	return err
}

func (t pgxTx) QueryRow(ctx context.Context, sql string, args ...any) Row {
	return t.tx.QueryRow(ctx, sql, args...)
}

func (t pgxTx) ForEachRow(ctx context.Context, sql string, args []any, scans []any, fn func() error) error {
	rows, err := t.tx.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	_, err = pgx.ForEachRow(rows, scans, fn)
	return err
}

func (t pgxTx) Rewind(ctx context.Context, s *partition.Store, rw []partition.Rewind) ([]partition.Rewound, error) {
	return s.RewindPgx(ctx, t.tx, rw)
}

// Bun is tx as a Tx. Its statements go to database/sql as they are, not
// through bun's query formatting, whose placeholder is ?: pgx's driver
// binds their $n parameters.
func Bun(tx bun.Tx) Tx { return bunTx{tx} }

type bunTx struct{ tx bun.Tx }

func (t bunTx) Exec(ctx context.Context, sql string, args ...any) error {
	_, err := t.tx.Tx.ExecContext(ctx, sql, args...)
	return err
}

func (t bunTx) QueryRow(ctx context.Context, sql string, args ...any) Row {
	return t.tx.Tx.QueryRowContext(ctx, sql, args...)
}

func (t bunTx) ForEachRow(ctx context.Context, sql string, args []any, scans []any, fn func() error) error {
	rows, err := t.tx.Tx.QueryContext(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(scans...); err != nil {
			return err
		}
		if err := fn(); err != nil {
			return err
		}
	}
	return rows.Err()
}

func (t bunTx) Rewind(ctx context.Context, s *partition.Store, rw []partition.Rewind) ([]partition.Rewound, error) {
	return s.Rewind(ctx, t.tx, rw)
}
