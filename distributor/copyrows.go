package distributor

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// CopyRow is the row a CopyRows fill function writes: one call per
// column, in the columns' order. The typed methods append a value in
// PostgreSQL's binary COPY format without boxing it in an interface;
// where the column's type is not the one the method writes directly
// (an int8 into a numeric column, say), the value is encoded as pgx
// encodes it.
type CopyRow struct {
	cols []copyColumn
	m    *pgtype.Map
	buf  []byte
	n    int // values written to the current row
	err  error
}

// copyColumn is one column of a COPY: its name (for errors) and type.
type copyColumn struct {
	name string
	oid  uint32
}

// Text writes s to the next column.
func (r *CopyRow) Text(s string) {
	c, ok := r.column()
	if !ok {
		return
	}
	if !textOID(c.oid) {
		r.encode(c, s)
		return
	}
	r.buf = binary.BigEndian.AppendUint32(r.buf, uint32(len(s)))
	r.buf = append(r.buf, s...)
	r.n++
}

// Bytes writes b to the next column: as text in a text column, as bytea
// in a bytea one.
func (r *CopyRow) Bytes(b []byte) {
	c, ok := r.column()
	if !ok {
		return
	}
	if b == nil {
		r.Null()
		return
	}
	if !textOID(c.oid) && c.oid != pgtype.ByteaOID {
		r.encode(c, b)
		return
	}
	r.buf = binary.BigEndian.AppendUint32(r.buf, uint32(len(b)))
	r.buf = append(r.buf, b...)
	r.n++
}

// Int64 writes v to the next column.
func (r *CopyRow) Int64(v int64) {
	c, ok := r.column()
	if !ok {
		return
	}
	switch {
	case c.oid == pgtype.Int8OID:
		r.buf = binary.BigEndian.AppendUint32(r.buf, 8)
		r.buf = binary.BigEndian.AppendUint64(r.buf, uint64(v))
	case c.oid == pgtype.Int4OID && v >= math.MinInt32 && v <= math.MaxInt32:
		r.buf = binary.BigEndian.AppendUint32(r.buf, 4)
		r.buf = binary.BigEndian.AppendUint32(r.buf, uint32(int32(v)))
	default:
		r.encode(c, v)
		return
	}
	r.n++
}

// Time writes t to the next column.
func (r *CopyRow) Time(t time.Time) {
	c, ok := r.column()
	if !ok {
		return
	}
	if c.oid != pgtype.TimestamptzOID {
		r.encode(c, t)
		return
	}
	// Microseconds since 2000-01-01 00:00:00 UTC, PostgreSQL's epoch.
	us := t.Unix()*1_000_000 + int64(t.Nanosecond())/1000 - postgresEpochMicros
	r.buf = binary.BigEndian.AppendUint32(r.buf, 8)
	r.buf = binary.BigEndian.AppendUint64(r.buf, uint64(us))
	r.n++
}

// postgresEpochMicros is 2000-01-01 00:00:00 UTC in Unix microseconds.
const postgresEpochMicros = 946_684_800_000_000

// Null writes SQL NULL to the next column.
func (r *CopyRow) Null() {
	if _, ok := r.column(); !ok {
		return
	}
	r.buf = binary.BigEndian.AppendUint32(r.buf, math.MaxUint32) // -1: NULL
	r.n++
}

// Value writes v, any Go value pgx can encode as the column's type, to
// the next column: nil is NULL, and a string is also taken as the
// column type's text form ("42" for an integer), as pgx's CopyFrom
// takes it.
func (r *CopyRow) Value(v any) {
	switch v := v.(type) {
	case nil:
		r.Null()
	case string:
		r.Text(v)
	case []byte:
		r.Bytes(v)
	case int64:
		r.Int64(v)
	case time.Time:
		r.Time(v)
	default:
		if c, ok := r.column(); ok {
			r.encode(c, v)
		}
	}
}

// encode writes v to column c as pgx encodes it.
func (r *CopyRow) encode(c copyColumn, v any) {
	at := len(r.buf)
	r.buf = binary.BigEndian.AppendUint32(r.buf, 0)
	out, err := r.m.Encode(c.oid, pgx.BinaryFormatCode, v, r.buf)
	if err != nil {
		out, err = r.encodeText(c, v, r.buf)
	}
	if err != nil {
		r.err = fmt.Errorf("encoding column %s (%T): %w", c.name, v, err)
		return
	}
	if out == nil { // the value is NULL
		r.buf = binary.BigEndian.AppendUint32(r.buf[:at], math.MaxUint32)
	} else {
		r.buf = out
		binary.BigEndian.PutUint32(r.buf[at:], uint32(len(r.buf)-at-4))
	}
	r.n++
}

// encodeText encodes a string v (or a value whose text form pgx can
// write) by parsing it as the column type's text form.
func (r *CopyRow) encodeText(c copyColumn, v any, buf []byte) ([]byte, error) {
	s, ok := v.(string)
	if !ok {
		text, err := r.m.Encode(c.oid, pgx.TextFormatCode, v, nil)
		if err != nil {
			return nil, err
		}
		s = string(text)
	}
	var parsed any
	if err := r.m.Scan(c.oid, pgx.TextFormatCode, []byte(s), &parsed); err != nil {
		return nil, err
	}
	return r.m.Encode(c.oid, pgx.BinaryFormatCode, parsed, buf)
}

// column is the column the next value goes to, or false (and the row's
// error set) when the row already has a value for every column.
func (r *CopyRow) column() (copyColumn, bool) {
	if r.err != nil {
		return copyColumn{}, false
	}
	if r.n >= len(r.cols) {
		r.err = fmt.Errorf("more than %d values in a row of %d columns", len(r.cols), len(r.cols))
		return copyColumn{}, false
	}
	return r.cols[r.n], true
}

// textOID says whether a column of type oid takes a string's bytes as
// its binary form.
func textOID(oid uint32) bool {
	return oid == pgtype.TextOID || oid == pgtype.VarcharOID || oid == pgtype.BPCharOID || oid == pgtype.NameOID
}

// copyRows copies the rows fill writes into table. fill writes one row
// and returns true, or writes nothing and returns false once there are
// no more.
func (c *txConn) copyRows(ctx context.Context, table, columns []string, fill func(*CopyRow) (bool, error)) (int64, error) {
	var n int64
	err := c.raw(func(pc *pgx.Conn) error {
		ident := pgx.Identifier(table).Sanitize()
		quoted := make([]string, len(columns))
		for i, col := range columns {
			quoted[i] = pgx.Identifier{col}.Sanitize()
		}
		list := strings.Join(quoted, ", ")
		// The columns' types, as pgx's CopyFrom finds them: an unnamed
		// statement, so it is safe behind a transaction pooler.
		sd, err := pc.PgConn().Prepare(ctx, "", "SELECT "+list+" FROM "+ident, nil)
		if err != nil {
			return fmt.Errorf("finding the column types of %s: %w", ident, err)
		}
		cols := make([]copyColumn, len(columns))
		for i, f := range sd.Fields {
			cols[i] = copyColumn{name: columns[i], oid: f.DataTypeOID}
		}
		src := &copyReader{row: CopyRow{cols: cols, m: pc.TypeMap(), buf: []byte(copyHeader)}, fill: fill}
		var tag pgconn.CommandTag
		tag, err = pc.PgConn().CopyFrom(ctx, src, "COPY "+ident+" ("+list+") FROM STDIN BINARY")
		if src.err != nil {
			// The server's reply only quotes the reason the copy was
			// abandoned with; return the reason itself.
			return src.err
		}
		n = tag.RowsAffected()
		return err
	})
	return n, err
}

// copyReader is the binary COPY stream of the rows its fill function
// writes, encoded as the server reads it; its buffer starts with the
// stream's header.
type copyReader struct {
	row  CopyRow
	fill func(*CopyRow) (bool, error)
	off  int // bytes of row.buf the last read took
	done bool
	err  error // why the stream was abandoned
}

// callFill calls the fill function, turning a panic into an error: it
// runs on the goroutine that sends the stream, where a panic could not
// be recovered by the batch that called CopyRows.
func (s *copyReader) callFill() (more bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic writing a row: %v", p)
		}
	}()
	return s.fill(&s.row)
}

// copyHeader starts a binary COPY stream: the signature, no flags and no
// header extension.
const copyHeader = "PGCOPY\n\377\r\n\000\x00\x00\x00\x00\x00\x00\x00\x00"

func (s *copyReader) Read(p []byte) (int, error) {
	r := &s.row
	if s.off > 0 { // keep what the last read left, less than a row
		r.buf = r.buf[:copy(r.buf, r.buf[s.off:])]
		s.off = 0
	}
	for len(r.buf) < len(p) && !s.done {
		start := len(r.buf)
		r.n = 0
		r.buf = binary.BigEndian.AppendUint16(r.buf, uint16(len(r.cols)))
		more, err := s.callFill()
		if err == nil {
			err = r.err
		}
		if err == nil && !more && r.n != 0 {
			err = fmt.Errorf("%d values written for a row that was not to be copied", r.n)
		}
		if err == nil && more && r.n != len(r.cols) {
			err = fmt.Errorf("%d values in a row of %d columns", r.n, len(r.cols))
		}
		if err != nil {
			s.err = fmt.Errorf("reading the rows to copy: %w", err)
			return 0, s.err
		}
		if !more {
			r.buf = binary.BigEndian.AppendUint16(r.buf[:start], math.MaxUint16) // -1: the trailer
			s.done = true
		}
	}
	k := copy(p, r.buf)
	s.off = k
	if s.done && k == len(r.buf) {
		return k, io.EOF
	}
	return k, nil
}
