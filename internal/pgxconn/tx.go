package pgxconn

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// InTx runs fn in a pgx transaction on a connection of db, committed when
// fn returns nil and rolled back otherwise: for work that wants pgx's
// own transaction (a pipeline of statements, say) rather than
// database/sql's.
func InTx(ctx context.Context, db *sql.DB, fn func(pgx.Tx) error) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("acquiring a database connection: %w", err)
	}
	defer conn.Close()
	return Raw(conn, func(c *pgx.Conn) error { return pgx.BeginFunc(ctx, c, fn) })
}
