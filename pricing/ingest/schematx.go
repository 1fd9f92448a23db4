package ingest

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/batonhq/baton/schema"
)

// schemaTx is a transaction whose statements name baton's tables with
// schema.Placeholder: it qualifies them with the configured schema before
// sending them (rewrites are cached by schema.SQL). Savepoints begun on it
// do the same.
type schemaTx struct {
	pgx.Tx
	schema string
}

func (t schemaTx) Begin(ctx context.Context) (pgx.Tx, error) {
	sp, err := t.Tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return schemaTx{sp, t.schema}, nil
}

func (t schemaTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return t.Tx.Exec(ctx, schema.SQL(t.schema, sql), args...)
}

func (t schemaTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return t.Tx.Query(ctx, schema.SQL(t.schema, sql), args...)
}

func (t schemaTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return t.Tx.QueryRow(ctx, schema.SQL(t.schema, sql), args...)
}
