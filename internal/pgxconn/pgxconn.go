// Package pgxconn reaches the pgx connection behind a connection of
// baton's database handle (dbconn.DB), for what database/sql cannot
// express: COPY, LISTEN, binary-format results, statements prepared per
// connection. It is baton's own: the public API offers what needs it as
// methods (a batch's CopyFrom, say), never the pgx connection.
package pgxconn

import (
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// Unwrapper is a driver connection that is not pgx's own but holds one
// (dbconn's connection through a transaction pooler).
type Unwrapper interface {
	PgxConn() *pgx.Conn
}

// Raw calls fn with the pgx connection behind conn, a connection of a
// handle opened with pgx's database/sql driver. Statements fn sends run in
// whatever transaction conn is in; fn must not keep the connection after
// it returns.
func Raw(conn *sql.Conn, fn func(*pgx.Conn) error) error {
	return conn.Raw(func(dc any) error {
		switch c := dc.(type) {
		case *stdlib.Conn:
			return fn(c.Conn())
		case Unwrapper:
			return fn(c.PgxConn())
		}
		return fmt.Errorf("unexpected driver connection %T", dc)
	})
}
