package ingest

import (
	"encoding/binary"
	"errors"
)

// The direct copy writes record_chunks in COPY's binary format, encoding
// the few fixed column types itself instead of through pgx's per-value
// encoding: that saves the loader most of its CPU during the copy, which
// on a small server competes with the database's. The texts are valid
// UTF-8 without NUL (the readers' rules), as the binary format of text
// requires.

// eachArrayElem calls fn with each element of a one-dimensional array in
// PostgreSQL's binary format (dimensions, NULL flag, element type, then
// length and lower bound of the dimension, then each element's length and
// bytes). NULL elements are an error.
func eachArrayElem(b []byte, fn func([]byte)) error {
	if len(b) < 12 {
		return errors.New("short array")
	}
	switch binary.BigEndian.Uint32(b) {
	case 0:
		return nil
	case 1:
	default:
		return errors.New("array of more than one dimension")
	}
	if len(b) < 20 {
		return errors.New("short array")
	}
	n, rest := int(binary.BigEndian.Uint32(b[12:])), b[20:]
	for range n {
		if len(rest) < 4 {
			return errors.New("short array")
		}
		size := int32(binary.BigEndian.Uint32(rest))
		if size < 0 || int(size) > len(rest)-4 {
			return errors.New("NULL or truncated element")
		}
		fn(rest[4 : 4+size])
		rest = rest[4+size:]
	}
	return nil
}

// sqlAffectedDirect fills load_affected as sqlAffected and sqlBase do, from
// the contracts of the direct copy ($1 in contract_id order, their new
// record counts and tasks.available before the load).
const sqlAffectedDirect = `
INSERT INTO load_affected (contract_id, n_new, n_redelivered, tiers_changed, ord, base)
SELECT contract_id, sum(n_new), 0, bool_or(tiers_changed), row_number() OVER (ORDER BY contract_id), max(base)
  FROM (SELECT u.contract_id COLLATE "C" AS contract_id, u.n_new, false AS tiers_changed, u.base
          FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS u (contract_id, n_new, base)
        UNION ALL
        SELECT contract_id, 0, true, NULL FROM load_tier_sets WHERE existed AND changed) u
 GROUP BY contract_id`

// ChunkSize is the most records one row of record_chunks holds. A chunk
// holds consecutive records of one contract from one load; a load writes
// each contract's new records in chunks of this size from its first new
// seq on, but for the last and those its memory budget wrote early.
const ChunkSize = 1024

// copyEncoderChunk is about the most COPY data encoded at a time.
const copyEncoderChunk = 64 << 10

// binaryCopyHeader is the signature, flags and header extension length of
// PostgreSQL's binary COPY format.
var binaryCopyHeader = []byte("PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00")

// Type OIDs of the array elements, as the binary array format names them.
const (
	oidText = 25
	oidInt8 = 20
)

// appendArrayHeader appends a one-dimensional array's field length (size,
// header included), its header and its dimension.
func appendArrayHeader(b []byte, size int, oid uint32, n int) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(size))
	b = binary.BigEndian.AppendUint32(b, 1) // dimensions
	b = binary.BigEndian.AppendUint32(b, 0) // no NULLs
	b = binary.BigEndian.AppendUint32(b, oid)
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	return binary.BigEndian.AppendUint32(b, 1) // lower bound
}

func appendText(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

func appendInt8(b []byte, v int64) []byte {
	b = binary.BigEndian.AppendUint32(b, 8)
	return binary.BigEndian.AppendUint64(b, uint64(v))
}
