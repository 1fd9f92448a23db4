package reprice

import (
	"context"
	"encoding/json"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"

	"github.com/batonhq/baton/internal/pgxwork"
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
	// Rewind rewinds partitions of kind in schemaName (partition's
	// Store.RewindTx); only each result's Key and Generation are set.
	Rewind(ctx context.Context, schemaName, kind string, rw []partition.Rewind) ([]partition.Rewound, error)
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

func (t pgxTx) Rewind(ctx context.Context, schemaName, kind string, rw []partition.Rewind) ([]partition.Rewound, error) {
	in := pgxwork.Rewinds{Keys: make([]string, len(rw)), Positions: make([]int64, len(rw)), States: make([]json.RawMessage, len(rw))}
	for i, r := range rw {
		in.Keys[i], in.Positions[i], in.States[i] = r.Key, r.Position, r.State
	}
	generations, err := pgxwork.Rewind(ctx, t.tx, schemaName, kind, in)
	if err != nil {
		return nil, err
	}
	out := make([]partition.Rewound, 0, len(generations))
	for k, g := range generations {
		out = append(out, partition.Rewound{Key: k, Generation: g})
	}
	return out, nil
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

func (t bunTx) Rewind(ctx context.Context, schemaName, kind string, rw []partition.Rewind) ([]partition.Rewound, error) {
	return partition.NewStore(nil, schemaName).Kind(kind).RewindTx(ctx, t.tx, rw)
}
