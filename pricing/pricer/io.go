package pricer

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/pricing"
)

// A batch's records are read and its priced rows written over the batch
// transaction's own connection (distributor.Batch's QueryRaw, Exec and
// CopyFrom), so both stay
// inside the fence and commit with the checkpoint:
//
//   - records are read in binary from their chunks (the statement's
//     description is cached per connection, so it costs one round trip) into
//     a reused workspace: the chunks' arrays are sliced and the record ids
//     copied into one buffer, not allocated record by record;
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

// readRecordsSQL reads the chunks holding the records after $2, up to
// $2 + $3: from the one holding seq $2 + 1 (the last to start at or before
// it) to the last starting at or before $2 + $3, both found on the primary
// key.
const readRecordsSQL = `SELECT first_seq, record_ids, amounts FROM {{.Schema}}.record_chunks
WHERE contract_id = $1
  AND first_seq >= coalesce((SELECT max(first_seq) FROM {{.Schema}}.record_chunks
                              WHERE contract_id = $1 AND first_seq <= $2 + 1), 1)
  AND first_seq <= $2 + $3
ORDER BY first_seq`

// readRecords reads up to limit records of contract after seq into w.recs,
// from the chunks that hold them. The chunks' arrays are read in binary and
// sliced: each record's id is copied into the workspace's id buffer, and
// nothing is allocated per record. A chunk that does not continue the one
// before shows as a seq out of order, which Process reports as corrupt.
func (p *Processor) readRecords(ctx context.Context, b *distributor.Batch, w *workspace, contract string, after int64, limit int) error {
	w.recs, w.ids = w.recs[:0], w.ids[:0]
	last := after + int64(limit)
	err := b.QueryRaw(ctx, func(row [][]byte) error {
		return w.appendChunk(row, after, last)
	}, p.sql(readRecordsSQL), contract, after, limit)
	if err != nil {
		return fmt.Errorf("reading records of contract %s after seq %d: %w", contract, after, err)
	}
	// The buffer may have moved while it grew: slice it only now.
	for i := range w.recs {
		w.recs[i].recordID = w.ids[w.recs[i].idFrom:w.recs[i].idTo]
	}
	return nil
}

// appendChunk appends to w.recs the records of one chunk row (raw: its
// first_seq, record_ids and amounts in binary) that lie in (after, last].
func (w *workspace) appendChunk(raw [][]byte, after, last int64) error {
	if len(raw) != 3 || len(raw[0]) != 8 {
		return fmt.Errorf("%w: unexpected chunk row", ErrCorrupt)
	}
	first := int64(binary.BigEndian.Uint64(raw[0]))
	ids, err := arrayElems(raw[1])
	if err != nil {
		return fmt.Errorf("%w: record ids of the chunk at seq %d: %v", ErrCorrupt, first, err)
	}
	amounts, err := arrayElems(raw[2])
	if err != nil {
		return fmt.Errorf("%w: amounts of the chunk at seq %d: %v", ErrCorrupt, first, err)
	}
	if ids.n != amounts.n {
		return fmt.Errorf("%w: the chunk at seq %d has %d record ids and %d amounts", ErrCorrupt, first, ids.n, amounts.n)
	}
	for i := range ids.n {
		id, err := ids.next()
		if err != nil {
			return fmt.Errorf("%w: record ids of the chunk at seq %d: %v", ErrCorrupt, first, err)
		}
		amount, err := amounts.next()
		if err != nil || len(amount) != 8 {
			return fmt.Errorf("%w: amounts of the chunk at seq %d: bad element", ErrCorrupt, first)
		}
		seq := first + int64(i)
		if seq <= after || seq > last {
			continue
		}
		from := len(w.ids)
		w.ids = append(w.ids, id...)
		w.recs = append(w.recs, record{seq: seq, idFrom: from, idTo: len(w.ids), amount: int64(binary.BigEndian.Uint64(amount))})
	}
	return nil
}

// binArray walks the elements of a one-dimensional array in PostgreSQL's
// binary format.
type binArray struct {
	n    int
	rest []byte
}

// arrayElems reads the header of a binary array (dimensions, NULL flag,
// element type, then length and lower bound of each dimension).
func arrayElems(b []byte) (binArray, error) {
	if len(b) < 12 {
		return binArray{}, fmt.Errorf("short array")
	}
	dims := binary.BigEndian.Uint32(b)
	switch dims {
	case 0:
		return binArray{}, nil
	case 1:
	default:
		return binArray{}, fmt.Errorf("array of %d dimensions", dims)
	}
	if len(b) < 20 {
		return binArray{}, fmt.Errorf("short array")
	}
	return binArray{n: int(binary.BigEndian.Uint32(b[12:])), rest: b[20:]}, nil
}

// next returns the next element's bytes; NULL is an error.
func (a *binArray) next() ([]byte, error) {
	if len(a.rest) < 4 {
		return nil, fmt.Errorf("short array")
	}
	n := int32(binary.BigEndian.Uint32(a.rest))
	if n < 0 || int(n) > len(a.rest)-4 {
		return nil, fmt.Errorf("NULL or truncated element")
	}
	e := a.rest[4 : 4+n]
	a.rest = a.rest[4+n:]
	return e, nil
}

// pricedColumns are the columns a batch writes into priced_rows.
var pricedColumns = []string{"contract_id", "seq", "record_id", "gross_minor", "discount_minor", "net_minor", "claim_version", "priced_by", "generation"}

// insertOneSQL writes a batch of one priced line: for a single row an
// INSERT costs the server a fraction of a COPY's setup (a one-record
// contract's batch, or the tail of a larger one). Same table, same key,
// same transaction.
const insertOneSQL = `INSERT INTO {{.Schema}}.priced_rows
(contract_id, seq, record_id, gross_minor, discount_minor, net_minor, claim_version, priced_by, generation)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`

// writePriced copies lines, the priced lines of recs (of w), into
// priced_rows as rows of generation gen (a single line is inserted): where
// they stay, whether gen is current, being priced or a preview.
func (p *Processor) writePriced(ctx context.Context, b *distributor.Batch, w *workspace, recs []record, lines []pricing.Line, gen int64) error {
	cols := pricedColumns
	if len(lines) == 1 {
		r, l := &recs[0], &lines[0]
		_, err := b.Exec(ctx, p.sql(insertOneSQL),
			contractOf(b), r.seq, string(r.recordID), l.Gross, l.Discount, l.Net, b.Lease.Version, b.Owner, gen)
		return err
	}
	contract, next := contractOf(b), copyOrder(b, len(lines))
	n, err := b.CopyRows(ctx, []string{p.schema, "priced_rows"}, cols, func(row *distributor.CopyRow) (bool, error) {
		i, ok := next()
		if !ok {
			return false, nil
		}
		writePricedRow(row, contract, &recs[i], &lines[i], b.Lease.Version, b.Owner, gen)
		return true, nil
	})
	if err == nil && n != int64(len(lines)) {
		err = fmt.Errorf("copied %d rows, want %d", n, len(lines))
	}
	return err
}

// writePricedRow writes the priced row of r, priced as l, in
// pricedColumns' order.
func writePricedRow(row *distributor.CopyRow, contract string, r *record, l *pricing.Line, version int64, owner string, gen int64) {
	row.Text(contract)
	row.Int64(r.seq)
	row.Bytes(r.recordID)
	row.Int64(l.Gross)
	row.Int64(l.Discount)
	row.Int64(l.Net)
	row.Int64(version)
	row.Text(owner)
	row.Int64(gen)
}

// copyOrder yields the indexes of b's n priced lines in the order they
// are copied: interleaved for a segment's batch, in order otherwise.
func copyOrder(b *distributor.Batch, n int) func() (int, bool) {
	if b.Partition != b.Lease.Key {
		return interleaved(n)
	}
	return inOrder(n)
}

// inOrder yields 0, 1, …, n-1: the order a batch's rows are copied in.
func inOrder(n int) func() (int, bool) {
	i := -1
	return func() (int, bool) {
		i++
		return i, i < n
	}
}

// interleaved yields 0 … n-1 in two ascending passes: first the indexes
// whose remainder by 9 is even (five of every nine), then the rest. It is
// the order a segment's batch copies its rows in, alone or in a group.
//
// A segment's rows ascend in priced_rows_key, usually just before keys
// already written (the contract's later segments, priced at the same
// time, and the contracts after it) rather than after the last one.
// PostgreSQL splits a leaf that such an ascending run overflows in the
// middle (its split for ascending inserts applies only to index tuples of
// at most two int8 whose first column equals the previous tuple's, and
// this key's are wider), and the run never comes back to the left half, so
// every leaf a segment fills in order ends about half full: twice the
// splits and leaves of rows written at the end of the index, which made a
// contract priced in segments cost 15–19 % more per record. The second
// pass fills the gaps the first left: half a leaf times 9/5 would be nine
// tenths, and TestSegmentsLeaveTheKeysLeavesFull measures about 85 %. A
// contract priced in one piece is copied in order: its rows often do
// reach the end of the index, and a re-pricing of it writes each new row
// beside the one it supersedes, which the half-full leaves of a first
// pricing take without a split (a re-pricing of a contract first priced in
// segments splits its fuller leaves instead).
func interleaved(n int) func() (int, bool) {
	i, pass := -1, 0
	return func() (int, bool) {
		for {
			if i++; i >= n {
				if pass == 1 {
					return 0, false
				}
				pass, i = 1, 0
			}
			if i%9%2 == pass {
				return i, true
			}
		}
	}
}
