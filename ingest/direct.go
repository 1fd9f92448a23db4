package ingest

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/batonhq/baton/schema"
)

// directMaxBytesDefault bounds the memory the direct copy holds: the
// records of a larger file are stored by the staged path alone.
const directMaxBytesDefault = 256 << 20

// directRowBytes is the memory one held record takes besides its contract
// and record ids: its directRow, its place in the sort order and the rest
// of its line (the ids are substrings of the line the CSV reader read).
const directRowBytes = 64

// directBlock is the number of held rows per block. Rows are held in
// blocks so that holding more never copies those already held.
const directBlock = 1 << 14

// directRow is one valid record held for the direct copy.
type directRow struct {
	recordID string
	hash     uint64 // of recordID, with directBuf.seed
	amount   int64
	line     int64
	contract int32 // index into directBuf.contracts
	skip     bool  // not to be stored: invalid or re-delivered (copyAccepted)
}

// directContract is a contract named by the held records.
type directContract struct {
	id   string
	n    int64 // records held
	base int64 // tasks.available before the load (0 without a task row)
}

// directBuf holds the valid records of the file for the direct copy
// instead of staging them. From the first invalid row on (or once the
// direct copy gave way) it holds them besides staging them (staged), so
// that copyAccepted can store the accepted ones after the staged checks.
// It gives up (off) when it would exceed its memory budget, and hands back
// the rows it held without staging them.
type directBuf struct {
	seed      maphash.Seed // hashes the record ids (directRow.hash)
	blocks    [][]directRow
	n         int // rows held
	index     map[string]int32
	contracts []directContract
	raws      map[int64]string // staging raw column of held rows, by line (integers with leading zeros)
	bytes     int64
	maxBytes  int64
	staged    bool // the held rows are staged too
	off       bool
}

func newDirectBuf(maxBytes int64, seed maphash.Seed) *directBuf {
	return &directBuf{seed: seed, index: make(map[string]int32), raws: make(map[int64]string), maxBytes: maxBytes}
}

func (b *directBuf) row(i int32) *directRow { return &b.blocks[i/directBlock][i%directBlock] }

// add holds a valid row, whose staging raw column is raw (if not empty)
// and whose record id hashes to hash with b.seed. It returns false,
// holding nothing, if the row does not fit the budget.
func (b *directBuf) add(row RecordRow, raw string, hash uint64) bool {
	b.bytes += directRowBytes + int64(len(row.RecordID)+len(raw))
	if b.bytes > b.maxBytes {
		return false
	}
	c, ok := b.index[row.ContractID]
	if !ok {
		c = int32(len(b.contracts))
		b.index[row.ContractID] = c
		b.contracts = append(b.contracts, directContract{id: row.ContractID})
		b.bytes += directRowBytes + int64(len(row.ContractID))
	}
	b.contracts[c].n++
	if raw != "" {
		b.raws[row.Line] = raw
	}
	if b.n%directBlock == 0 {
		b.blocks = append(b.blocks, make([]directRow, 0, directBlock))
	}
	last := &b.blocks[len(b.blocks)-1]
	*last = append(*last, directRow{recordID: row.RecordID, hash: hash, amount: row.AmountMinor, line: row.Line, contract: c})
	b.n++
	return true
}

// giveUp turns the buffer off and hands back the held rows that still
// need staging (none if they are staged already).
func (b *directBuf) giveUp() *heldRows {
	h := &heldRows{blocks: b.blocks, contracts: b.contracts, raws: b.raws}
	if b.staged {
		h.blocks = nil
	}
	b.off = true
	b.blocks, b.n, b.index, b.contracts, b.raws = nil, 0, nil, nil, nil
	return h
}

// stageAll hands out the held rows for staging and keeps holding them;
// from now on every row held is staged too.
func (b *directBuf) stageAll() *heldRows {
	b.staged = true
	return &heldRows{blocks: slices.Clone(b.blocks), contracts: b.contracts, raws: b.raws, keep: true}
}

// heldRows gives held rows back as staging rows, in file order, dropping
// each block once it is given back.
type heldRows struct {
	blocks    [][]directRow
	i         int // next row of blocks[0]
	contracts []directContract
	raws      map[int64]string
	keep      bool // the buffer keeps the blocks: do not drop them
	vals      []any
}

// next fills v with the next row's staging columns (line, contract_id,
// record_id, amount_minor, raw, err); false when none are left.
func (h *heldRows) next(v []any) bool {
	for len(h.blocks) > 0 && h.i == len(h.blocks[0]) {
		if !h.keep {
			h.blocks[0] = nil
		}
		h.blocks, h.i = h.blocks[1:], 0
	}
	if len(h.blocks) == 0 {
		return false
	}
	r := &h.blocks[0][h.i]
	h.i++
	var raw any
	if s, ok := h.raws[r.line]; ok {
		raw = s
	}
	v[0], v[1], v[2], v[3], v[4], v[5] = r.line, h.contracts[r.contract].id, r.recordID, r.amount, raw, nil
	return true
}

// heldRows is a pgx.CopyFromSource for staging the held rows at once.
func (h *heldRows) Next() bool             { return h.next(h.vals) }
func (h *heldRows) Values() ([]any, error) { return h.vals, nil }
func (h *heldRows) Err() error             { return nil }

// sorted returns the indexes of the held rows not skipped, ordered by
// (contract_id, file order), the order of record_chunks; the
// contracts in that order; and the number of rows of each. A contract's
// rows are already in file order, so a stable counting sort by contract
// does it.
func (b *directBuf) sorted() (rows, order []int32, counts []int64) {
	order = make([]int32, len(b.contracts))
	counts = make([]int64, len(b.contracts))
	var total int32
	for _, blk := range b.blocks {
		for j := range blk {
			if !blk[j].skip {
				counts[blk[j].contract]++
				total++
			}
		}
	}
	for i := range order {
		order[i] = int32(i)
	}
	// Go compares strings bytewise, as the "C" collation of contract_id does.
	slices.SortFunc(order, func(x, y int32) int { return cmp.Compare(b.contracts[x].id, b.contracts[y].id) })
	start := make([]int32, len(b.contracts))
	var at int32
	for _, c := range order {
		start[c] = at
		at += int32(counts[c])
	}
	rows = make([]int32, total)
	var i int32
	for _, blk := range b.blocks {
		for j := range blk {
			if c := blk[j].contract; !blk[j].skip {
				rows[start[c]] = i
				start[c]++
			}
			i++
		}
	}
	return rows, order, counts
}

// errDirectRepeat reports that the direct copy met a record id that
// repeats a stored one or an earlier row of the file.
var errDirectRepeat = errors.New("record ids repeated")

// insertDirect stores the held records with one COPY straight into
// record_chunks, sorted by (contract_id, seq), when the rules that need
// the database can be settled without the staging table: every row was
// valid on its own, the load rejected no tier row, every contract exists,
// and no contract comes near the cumulative gross limit. seq continues
// from tasks.available (stable under the load lock) in file order.
//
// A record id that repeats a stored one or an earlier row (a re-delivery,
// or an error) is found while the chunks are encoded: the record ids of
// the contracts that have records already (available > 0) are read first,
// in one query, and each contract's ids are checked against them and
// against its earlier rows. A repeat ends the COPY, which is rolled back to
// its savepoint, and errDirectRepeat is returned. It returns false, having
// changed nothing, when the staged path must store the records.
func (l *loader) insertDirect(ctx context.Context, tx pgx.Tx) (bool, error) {
	b := l.direct
	if b == nil || b.off || b.staged || b.n == 0 {
		return false, nil
	}
	l.stage(StageValidating)
	var tierRejects bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM load_tiers WHERE err IS NOT NULL)").Scan(&tierRejects); err != nil {
		return false, fmt.Errorf("checking tier rows: %w", err)
	}
	if tierRejects {
		return false, nil
	}
	ids := make([]string, len(b.contracts))
	for i, c := range b.contracts {
		ids[i] = c.id
	}
	rows, err := tx.Query(ctx, `
SELECT c.contract_id, coalesce(t.available, 0)
  FROM {{.Schema}}.contracts c LEFT JOIN {{.Schema}}.tasks t ON t.kind = '`+taskKind+`' AND t.partition_key = c.contract_id
 WHERE c.contract_id = ANY($1::text[])`, ids)
	if err != nil {
		return false, fmt.Errorf("checking contracts: %w", err)
	}
	found := 0
	var (
		id   string
		base int64
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &base}, func() error {
		c, ok := b.index[id]
		if !ok {
			return fmt.Errorf("unexpected contract %q", id)
		}
		b.contracts[c].base = base
		found++
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("checking contracts: %w", err)
	}
	if found < len(b.contracts) {
		return false, nil // unknown contracts: the staged path reports them
	}
	// Each record is at most MaxAmountMinor, so a contract whose stored and
	// new records number at most maxGross/MaxAmountMinor cannot pass the
	// limit; the staged path sums the others exactly.
	var withRecords []string
	for _, c := range b.contracts {
		if c.base+c.n > l.opts.maxGross/MaxAmountMinor {
			return false, nil
		}
		if c.base > 0 {
			withRecords = append(withRecords, c.id)
		}
	}
	stored, ok, err := l.readStoredIDs(ctx, tx, withRecords)
	if err != nil || !ok {
		return false, err
	}

	sorted, order, _ := b.sorted()
	l.stage(StageInserting)
	sp, err := tx.Begin(ctx) // a savepoint
	if err != nil {
		return false, fmt.Errorf("setting a savepoint: %w", err)
	}
	defer func() { _ = sp.Rollback(ctx) }() // a no-op after Commit
	n, err := l.copyRecords(ctx, sp, b, sorted, stored)
	if errors.Is(err, errDirectRepeat) {
		if rerr := sp.Rollback(ctx); rerr != nil {
			return false, fmt.Errorf("rolling back to the savepoint: %w", rerr)
		}
		return false, errDirectRepeat
	}
	if err != nil {
		return false, err
	}

	// What the staged path's load_affected holds, from the held counts.
	names := make([]string, len(order))
	news := make([]int64, len(order))
	bases := make([]int64, len(order))
	for i, c := range order {
		names[i], news[i], bases[i] = b.contracts[c].id, b.contracts[c].n, b.contracts[c].base
	}
	if _, err := exec(ctx, sp, "collecting contracts", sqlAffectedDirect, names, news, bases); err != nil {
		return false, err
	}
	if _, err := exec(ctx, sp, "creating task rows", sqlRecordTasks); err != nil {
		return false, err
	}
	if err := sp.Commit(ctx); err != nil {
		return false, fmt.Errorf("releasing the savepoint: %w", err)
	}
	l.rep.RecordsAccepted, l.rep.RecordsRedelivered = n, 0
	l.rep.DirectCopy = true
	l.direct = nil
	return true, nil
}

// storedIDs are the hashes of the stored record ids of some contracts,
// by the contracts' index in the buffer, for the direct copy's check for
// repeats (see copyEncoder.repeats).
type storedIDs struct {
	byContract map[int32][]uint64 // hashed with directBuf.seed
}

// readStoredIDs reads the stored record ids of the given contracts and
// keeps their hashes. Its cost follows the records stored for the
// contracts the file touches; contracts without records cost nothing. The
// chunks' arrays are read in binary and hashed in place. The hashes count
// against the buffer's budget: ok is false if they do not fit, and the
// staged path must check.
func (l *loader) readStoredIDs(ctx context.Context, tx pgx.Tx, contracts []string) (stored *storedIDs, ok bool, err error) {
	stored = &storedIDs{byContract: make(map[int32][]uint64, len(contracts))}
	if len(contracts) == 0 {
		return stored, true, nil
	}
	b := l.direct
	rows, err := tx.Query(ctx, `SELECT contract_id, record_ids FROM {{.Schema}}.record_chunks WHERE contract_id = ANY($1::text[])`,
		pgx.QueryExecModeDescribeExec, pgx.QueryResultFormats{pgx.BinaryFormatCode}, contracts)
	if err != nil {
		return nil, false, fmt.Errorf("reading stored record ids: %w", err)
	}
	defer rows.Close()
	bytes := b.bytes
	for rows.Next() {
		raw := rows.RawValues()
		c, known := b.index[string(raw[0])]
		if !known {
			return nil, false, fmt.Errorf("reading stored record ids: unexpected contract %q", raw[0])
		}
		hashes := stored.byContract[c]
		err := eachArrayElem(raw[1], func(id []byte) { hashes = append(hashes, maphash.Bytes(b.seed, id)) })
		if err != nil {
			return nil, false, fmt.Errorf("reading stored record ids of contract %s: %w", raw[0], err)
		}
		bytes += 8 * int64(len(hashes)-len(stored.byContract[c]))
		if bytes > b.maxBytes {
			return nil, false, nil
		}
		stored.byContract[c] = hashes
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("reading stored record ids: %w", err)
	}
	return stored, true, nil
}

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

// copyRecords copies the held rows at the given indexes into
// record_chunks, numbering each contract's rows from its base and cutting
// them into chunks of up to ChunkSize. The rows are encoded straight into
// COPY's binary format (see copyEncoder). With stored not nil, each
// contract's record ids are checked for repeats against its stored ids and
// one another, and errDirectRepeat returned if there are any.
func (l *loader) copyRecords(ctx context.Context, tx pgx.Tx, b *directBuf, rows []int32, stored *storedIDs) (int64, error) {
	enc := &copyEncoder{src: directSource{buf: b, order: rows}, loadID: l.rep.LoadID, stored: stored}
	tag, err := tx.Conn().PgConn().CopyFrom(ctx, enc, "COPY "+schema.Ident(l.opts.Schema)+
		".record_chunks (contract_id, first_seq, last_seq, load_id, record_ids, amounts) FROM STDIN (FORMAT binary)")
	if enc.err != nil {
		return 0, enc.err
	}
	if err != nil {
		return 0, fmt.Errorf("storing records: %w", err)
	}
	if n := tag.RowsAffected(); n != enc.chunks {
		return 0, fmt.Errorf("storing records: stored %d chunks, want %d", n, enc.chunks)
	}
	return int64(len(rows)), nil
}

// copyAccepted stores the accepted records on the staged path, after its
// checks, when the buffer still holds every valid row: the held rows that
// load_records marks invalid or re-delivered are skipped, the others
// copied as insertDirect does, with the bases and counts of load_affected
// (which sqlBase has filled). It returns the number stored.
func (l *loader) copyAccepted(ctx context.Context, tx pgx.Tx) (int64, error) {
	b := l.direct
	rows, err := tx.Query(ctx, "SELECT line FROM load_records WHERE err IS NOT NULL OR redelivered ORDER BY line")
	if err != nil {
		return 0, fmt.Errorf("collecting rejected rows: %w", err)
	}
	skip, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, fmt.Errorf("collecting rejected rows: %w", err)
	}
	// Held rows are in line order, as are the lines to skip.
	for _, blk := range b.blocks {
		for j := range blk {
			r := &blk[j]
			for len(skip) > 0 && skip[0] < r.line {
				skip = skip[1:]
			}
			r.skip = len(skip) > 0 && skip[0] == r.line
		}
	}
	want := make([]int64, len(b.contracts))
	rows, err = tx.Query(ctx, "SELECT contract_id, n_new, base FROM load_affected WHERE n_new > 0")
	if err != nil {
		return 0, fmt.Errorf("collecting contracts: %w", err)
	}
	var (
		id      string
		n, base int64
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &n, &base}, func() error {
		c, ok := b.index[id]
		if !ok {
			return fmt.Errorf("contract %s gains records but holds none", id)
		}
		want[c], b.contracts[c].base = n, base
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("collecting contracts: %w", err)
	}
	sorted, _, counts := b.sorted()
	for c, n := range counts {
		if n != want[c] {
			return 0, fmt.Errorf("storing records: contract %s has %d accepted records held, want %d", b.contracts[c].id, n, want[c])
		}
	}
	l.rep.heldCopy = true
	return l.copyRecords(ctx, tx, b, sorted, nil)
}

// stageHeld stages the rows held for the direct copy when it gave way, and
// keeps holding them for copyAccepted.
func (l *loader) stageHeld(ctx context.Context, tx pgx.Tx) error {
	b := l.direct
	if b == nil || b.off || b.staged || b.n == 0 {
		return nil
	}
	h := b.stageAll()
	h.vals = make([]any, 6)
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"load_records"},
		[]string{"line", "contract_id", "record_id", "amount_minor", "raw", "err"}, h); err != nil {
		return fmt.Errorf("copying rows to the database: %w", err)
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
// holds consecutive records of one contract from one load; a load cuts
// each contract's new records into chunks of this size from its first new
// seq on.
const ChunkSize = 1024

// directSource walks the held rows in the given order, numbering each
// contract's rows from its base.
type directSource struct {
	buf   *directBuf
	order []int32
	i     int
	cur   int32
	seq   int64
}

// next returns the next row, its contract and its seq; nil at the end.
func (s *directSource) next() (*directRow, *directContract, int64) {
	if s.i >= len(s.order) {
		return nil, nil, 0
	}
	r := s.buf.row(s.order[s.i])
	c := &s.buf.contracts[r.contract]
	if s.i == 0 || r.contract != s.cur {
		s.cur, s.seq = r.contract, c.base
	}
	s.seq++
	s.i++
	return r, c, s.seq
}

// chunk returns the rows of the next chunk: up to ChunkSize rows of one
// contract, its contract and the seq of its first row; nil at the end.
func (s *directSource) chunk() ([]int32, *directContract, int64) {
	if s.i >= len(s.order) {
		return nil, nil, 0
	}
	from := s.i
	r, c, first := s.next()
	for s.i < len(s.order) && s.i-from < ChunkSize && s.buf.row(s.order[s.i]).contract == r.contract {
		s.next()
	}
	return s.order[from:s.i], c, first
}

// copyEncoder is the data of a binary COPY into record_chunks
// (contract_id, first_seq, last_seq, load_id, record_ids, amounts): the
// header, one tuple per chunk of src and the trailer. Encoding the few
// fixed column types here instead of through pgx's per-value encoding
// saves the loader most of its CPU during the copy, which on a small
// server competes with the database's. The texts are valid UTF-8 without
// NUL (the readers' rules), as the binary format of text requires.
//
// With stored set, it also looks for record ids that repeat within a
// contract, among its held rows and its stored ids, as it encodes: the
// first one found ends the data with errDirectRepeat, which makes the COPY
// fail.
type copyEncoder struct {
	src     directSource
	loadID  int64
	stored  *storedIDs // nil: no check
	seen    hashSet
	seenFor int32
	buf     []byte
	pending []byte
	started bool
	done    bool
	err     error
	chunks  int64 // encoded
}

const copyEncoderChunk = 64 << 10

// binaryCopyHeader is the signature, flags and header extension length of
// PostgreSQL's binary COPY format.
var binaryCopyHeader = []byte("PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00")

// Type OIDs of the array elements, as the binary array format names them.
const (
	oidText = 25
	oidInt8 = 20
)

func (e *copyEncoder) Read(p []byte) (int, error) {
	if len(e.pending) == 0 {
		if e.err != nil {
			return 0, e.err
		}
		if e.done {
			return 0, io.EOF
		}
		e.fill()
		if e.err != nil {
			return 0, e.err
		}
	}
	n := copy(p, e.pending)
	e.pending = e.pending[n:]
	return n, nil
}

// fill encodes chunks into buf up to about copyEncoderChunk bytes.
func (e *copyEncoder) fill() {
	b := e.buf[:0]
	if !e.started {
		b = append(b, binaryCopyHeader...)
		e.started = true
	}
	for len(b) < copyEncoderChunk {
		rows, c, first := e.src.chunk()
		if rows == nil {
			b = binary.BigEndian.AppendUint16(b, 0xffff) // trailer
			e.done = true
			break
		}
		if e.stored != nil && e.repeats(rows) {
			e.err = errDirectRepeat
			return
		}
		e.chunks++
		b = binary.BigEndian.AppendUint16(b, 6)
		b = appendText(b, c.id)
		b = appendInt8(b, first)
		b = appendInt8(b, first+int64(len(rows))-1)
		b = appendInt8(b, e.loadID)
		size := 20
		for _, i := range rows {
			size += 4 + len(e.src.buf.row(i).recordID)
		}
		b = appendArrayHeader(b, size, oidText, len(rows))
		for _, i := range rows {
			b = appendText(b, e.src.buf.row(i).recordID)
		}
		b = appendArrayHeader(b, 20+12*len(rows), oidInt8, len(rows))
		for _, i := range rows {
			b = appendInt8(b, e.src.buf.row(i).amount)
		}
	}
	e.buf, e.pending = b, b
}

// repeats reports whether a record id of rows, the next chunk of their
// contract, may repeat an earlier one of the contract (stored or held).
// It compares 64-bit hashes: two different ids with the same hash, a
// chance of about n²/2⁶⁵ in a contract of n records, only send the load to
// the staged path, whose check is exact.
func (e *copyEncoder) repeats(rows []int32) bool {
	c := e.src.buf.row(rows[0]).contract
	if e.seen.slots == nil || c != e.seenFor {
		e.seenFor = c
		stored := e.stored.byContract[c]
		e.seen.reset(int(e.src.buf.contracts[c].n) + len(stored))
		for _, h := range stored {
			if !e.seen.add(h) {
				return true
			}
		}
	}
	for _, i := range rows {
		if !e.seen.add(e.src.buf.row(i).hash) {
			return true
		}
	}
	return false
}

// hashSet is a set of 64-bit hashes, open addressing with linear probing.
// The zero hash is stored as 1 (0 marks an empty slot).
type hashSet struct {
	slots []uint64
	mask  uint64
}

// reset empties the set and sizes it for n hashes.
func (h *hashSet) reset(n int) {
	size := 64
	for size < 2*n {
		size <<= 1
	}
	if cap(h.slots) < size {
		h.slots = make([]uint64, size)
	} else {
		h.slots = h.slots[:size]
		clear(h.slots)
	}
	h.mask = uint64(size - 1)
}

// add adds v and reports whether it was new.
func (h *hashSet) add(v uint64) bool {
	if v == 0 {
		v = 1
	}
	for i := v & h.mask; ; i = (i + 1) & h.mask {
		switch h.slots[i] {
		case 0:
			h.slots[i] = v
			return true
		case v:
			return false
		}
	}
}

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
