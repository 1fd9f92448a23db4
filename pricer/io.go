package pricer

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/pricing"
)

// A batch's records are read and its priced rows written over the batch
// transaction's own pgx connection (distributor.Batch.Raw), so both stay
// inside the fence and commit with the checkpoint:
//
//   - records are read in binary (the statement's description is cached per
//     connection, so it costs one round trip) into a reused workspace: the
//     record ids are copied into one buffer, not allocated row by row;
//   - priced rows are written with COPY in binary, which the server takes
//     several times faster than an INSERT of the same rows (a batch of a
//     single row is inserted: there COPY's setup costs more). The output's
//     primary key (contract_id, seq) is enforced by COPY as by INSERT, so a
//     batch that repeats committed rows still fails with 23505.

// workspace holds one batch's records and lines; reused through a pool.
type workspace struct {
	recs  []record
	ids   []byte // the record ids, back to back; record.recordID slices it
	lines []pricing.Line
	vals  []any // one COPY row
}

var workspaces = sync.Pool{New: func() any { return new(workspace) }}

func getWorkspace() *workspace { return workspaces.Get().(*workspace) }

// putWorkspace returns w to the pool unless it grew unusually large.
func putWorkspace(w *workspace) {
	if cap(w.ids) > 1<<22 || cap(w.recs) > 1<<16 {
		return
	}
	workspaces.Put(w)
}

const readRecordsSQL = `SELECT seq, record_id, amount_minor FROM {{.Schema}}.records
WHERE contract_id = $1 AND seq > $2
ORDER BY seq
LIMIT $3`

// readRecords reads up to limit records of contract after seq into w.recs.
func (p *Processor) readRecords(ctx context.Context, b *distributor.Batch, w *workspace, contract string, after int64, limit int) error {
	w.recs, w.ids = w.recs[:0], w.ids[:0]
	err := b.Raw(func(conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, p.sql(readRecordsSQL), pgx.QueryExecModeCacheDescribe, contract, after, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		var (
			r  record
			id pgtype.DriverBytes // valid until the next row: copied below
		)
		for rows.Next() {
			if err := rows.Scan(&r.seq, &id, &r.amount); err != nil {
				return err
			}
			from := len(w.ids)
			w.ids = append(w.ids, id...)
			r.idFrom, r.idTo = from, len(w.ids)
			w.recs = append(w.recs, r)
		}
		return rows.Err()
	})
	if err != nil {
		return fmt.Errorf("reading records of contract %s after seq %d: %w", contract, after, err)
	}
	// The buffer may have moved while it grew: slice it only now.
	for i := range w.recs {
		w.recs[i].recordID = w.ids[w.recs[i].idFrom:w.recs[i].idTo]
	}
	return nil
}

var pricedColumns = []string{"contract_id", "seq", "record_id", "gross_minor", "discount_minor", "net_minor", "claim_version", "priced_by"}

// insertOneSQL writes a batch of one priced line: for a single row an
// INSERT costs the server a fraction of a COPY's setup (a one-record
// contract's batch, or the tail of a larger one). Same table, same primary
// key, same transaction.
const insertOneSQL = `INSERT INTO {{.Schema}}.priced
(contract_id, seq, record_id, gross_minor, discount_minor, net_minor, claim_version, priced_by)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`

// writePriced copies w's priced lines into priced (a single line is
// inserted).
func (p *Processor) writePriced(ctx context.Context, b *distributor.Batch, w *workspace) error {
	if len(w.lines) == 1 {
		r, l := &w.recs[0], &w.lines[0]
		return b.Raw(func(conn *pgx.Conn) error {
			// Described once per connection, sent unnamed: no prepared
			// statement a transaction pooler could lose.
			_, err := conn.Exec(ctx, p.sql(insertOneSQL), pgx.QueryExecModeCacheDescribe,
				b.Lease.Key, r.seq, string(r.recordID), l.Gross, l.Discount, l.Net, b.Lease.Version, b.Owner)
			return err
		})
	}
	if cap(w.vals) < len(pricedColumns) {
		w.vals = make([]any, len(pricedColumns))
	}
	vals := w.vals[:len(pricedColumns)]
	vals[0], vals[6], vals[7] = b.Lease.Key, b.Lease.Version, b.Owner
	i := -1
	src := pgx.CopyFromFunc(func() ([]any, error) {
		i++
		if i == len(w.lines) {
			return nil, nil
		}
		r, l := &w.recs[i], &w.lines[i]
		vals[1], vals[2], vals[3], vals[4], vals[5] = r.seq, r.recordID, l.Gross, l.Discount, l.Net
		return vals, nil
	})
	return b.Raw(func(conn *pgx.Conn) error {
		n, err := conn.CopyFrom(ctx, pgx.Identifier{p.schema, "priced"}, pricedColumns, src)
		if err == nil && n != int64(len(w.lines)) {
			err = fmt.Errorf("copied %d rows, want %d", n, len(w.lines))
		}
		return err
	})
}
