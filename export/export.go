// Package export writes the priced records as CSV.
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
package export

import (
	"bufio"
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"

	"github.com/batonhq/baton/internal/dbconn"
	"github.com/batonhq/baton/schema"
)

// Header is the first line Write writes (without its line end).
const Header = "contract_id,record_id,gross_minor,discount_minor,net_minor"

// The column names produce Header through COPY's HEADER option.
const copySQL = `COPY (
    SELECT contract_id, record_id, gross_minor, discount_minor, net_minor
      FROM {{.Schema}}.priced
     ORDER BY contract_id COLLATE "C", seq
) TO STDOUT WITH (FORMAT csv, HEADER true)`

// Write writes every priced record of the pricing tables in schema
// schemaName (empty means schema.Default) to w as CSV and returns the
// number of records written (not counting the header).
func Write(ctx context.Context, db *bun.DB, schemaName string, w io.Writer) (rows int64, err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return 0, fmt.Errorf("exporting priced records: acquiring a database connection: %w", err)
	}
	defer conn.Close()
	bw := bufio.NewWriterSize(w, 1<<16)
	err = dbconn.Raw(conn.Conn, func(pc *pgx.Conn) error {
		tag, err := pc.PgConn().CopyTo(ctx, bw, schema.SQL(schemaName, copySQL))
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
