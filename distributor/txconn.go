package distributor

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"

	"github.com/batonhq/baton/internal/batchconn"
	"github.com/batonhq/baton/internal/pgxconn"
)

// ErrNoConn is returned by a batch's (or group's) Exec, QueryRaw and
// CopyFrom when it was built without the connection its transaction runs
// on (a Batch made by hand around a transaction).
var ErrNoConn = errors.New("batch has no connection")

// txConn is the connection a batch's transaction runs on, for the
// statements database/sql cannot express (Batch.Exec, QueryRaw,
// CopyFrom). They run inside the fenced transaction.
type txConn struct {
	conn bun.Conn
	// prepare: the connection reaches PostgreSQL itself, not through a
	// transaction pooler, so statements may be prepared and kept on it.
	prepare bool
}

// mode is how statements are sent: prepared once per connection where
// the connection allows it, otherwise unnamed with their description
// cached (no prepared statement a transaction pooler could lose).
func (c *txConn) mode() pgx.QueryExecMode {
	if c.prepare {
		return pgx.QueryExecModeCacheStatement
	}
	return pgx.QueryExecModeCacheDescribe
}

func (c *txConn) raw(fn func(*pgx.Conn) error) error {
	if c == nil || c.conn.Conn == nil {
		return ErrNoConn
	}
	return pgxconn.Raw(c.conn.Conn, fn)
}

func (c *txConn) exec(ctx context.Context, query string, args []any) (int64, error) {
	var n int64
	err := c.raw(func(pc *pgx.Conn) error {
		tag, err := pc.Exec(ctx, query, append([]any{c.mode()}, args...)...)
		n = tag.RowsAffected()
		return err
	})
	return n, err
}

func (c *txConn) queryRaw(ctx context.Context, fn func(row [][]byte) error, query string, args []any) error {
	return c.raw(func(pc *pgx.Conn) error {
		rows, err := pc.Query(ctx, query, append([]any{c.mode(), pgx.QueryResultFormats{pgx.BinaryFormatCode}}, args...)...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := fn(rows.RawValues()); err != nil {
				return err
			}
		}
		return rows.Err()
	})
}

// copyFrom is copyRows of the rows next returns, each value written
// with CopyRow.Value.
func (c *txConn) copyFrom(ctx context.Context, table, columns []string, next func() ([]any, error)) (int64, error) {
	return c.copyRows(ctx, table, columns, func(r *CopyRow) (bool, error) {
		row, err := next()
		if err != nil || row == nil {
			return false, err
		}
		if len(row) != len(columns) {
			return false, fmt.Errorf("%d values in a row of %d columns", len(row), len(columns))
		}
		for _, v := range row {
			r.Value(v)
		}
		return true, nil
	})
}

// Exec runs query, with PostgreSQL's own $1, $2 … placeholders, in the
// batch's transaction and returns the number of rows it affected. Unlike
// b.Tx it sends the statement through pgx itself: prepared once per
// connection where the connection reaches PostgreSQL directly, described
// once and sent unnamed through a transaction pooler, so a statement run
// by every batch costs one round trip and no parse.
func (b *Batch) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	return b.conn.exec(ctx, query, args)
}

// QueryRaw runs query as Exec does and calls fn with each row's column
// values in PostgreSQL's binary format (nil for NULL), without decoding
// them: for a processor that reads many rows and slices them itself. The
// values are valid only during the call; an error from fn stops the query
// and is returned.
func (b *Batch) QueryRaw(ctx context.Context, fn func(row [][]byte) error, query string, args ...any) error {
	return b.conn.queryRaw(ctx, fn, query, args)
}

// CopyFrom copies rows into table (its name, qualified or not:
// {"baton", "priced"} or {"priced"}) with COPY FROM STDIN in the batch's
// transaction, so they commit with its checkpoint or not at all. next
// returns the values of each row in columns' order, and nil once there
// are no more; the slice may be reused from one call to the next. It
// returns the number of rows copied.
func (b *Batch) CopyFrom(ctx context.Context, table, columns []string, next func() (row []any, err error)) (int64, error) {
	return b.conn.copyFrom(ctx, table, columns, next)
}

// CopyRows copies rows into table as CopyFrom does, but fill writes each
// row's values itself, one CopyRow call per column in columns' order,
// and returns true, or writes nothing and returns false once there are
// no more: a processor writing many rows this way boxes no value in an
// interface and allocates nothing per row.
func (b *Batch) CopyRows(ctx context.Context, table, columns []string, fill func(row *CopyRow) (more bool, err error)) (int64, error) {
	return b.conn.copyRows(ctx, table, columns, fill)
}

// CopyRows is Batch.CopyRows in the group's transaction.
func (g *Group) CopyRows(ctx context.Context, table, columns []string, fill func(row *CopyRow) (more bool, err error)) (int64, error) {
	return g.conn.copyRows(ctx, table, columns, fill)
}

// Exec is Batch.Exec in the group's transaction.
func (g *Group) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	return g.conn.exec(ctx, query, args)
}

// QueryRaw is Batch.QueryRaw in the group's transaction.
func (g *Group) QueryRaw(ctx context.Context, fn func(row [][]byte) error, query string, args ...any) error {
	return g.conn.queryRaw(ctx, fn, query, args)
}

// CopyFrom is Batch.CopyFrom in the group's transaction.
func (g *Group) CopyFrom(ctx context.Context, table, columns []string, next func() (row []any, err error)) (int64, error) {
	return g.conn.copyFrom(ctx, table, columns, next)
}

func init() {
	batchconn.Attach = func(batch any, conn bun.Conn) {
		batch.(*Batch).conn = &txConn{conn: conn}
	}
}
