package ingest

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"slices"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/batonhq/baton/schema"
)

// MemoryLimitDefault is the memory a load's records may take when
// Options.MemoryLimit is zero.
const MemoryLimitDefault = 128 << 20

// minMemoryLimit is the least Options.MemoryLimit allowed.
const minMemoryLimit = 1 << 20

// How the stream divides its memory budget: the filter of record ids, the
// records held in open chunks, and the rest (possible repeats, rejected
// rows and re-deliveries to remove, kept until the stream ends).
const (
	filterShare = 2 // 1/2 of the budget
	heldShare   = 3 // 3/8
	sideShare   = 8 // 1/8
)

// filterBytesPerFileByte sizes the filter for a file of known size: a
// records row takes at least 6 bytes, and 32 bits of filter per row are
// plenty, so a small file gets a small filter.
const filterBytesPerFileByte = 4.0 / 6

// errGiveUp ends the stream's COPY when the staged path must load the file
// instead (streamer.why says why).
var errGiveUp = errors.New("the direct copy gives way to the staged path")

// streamContract is a contract named by the records streamed.
type streamContract struct {
	id      string
	hash    uint64 // maphash of id
	base    int64  // tasks.available before the load, once known
	known   bool   // base has been read
	n       int64  // records streamed
	emitted int64  // records written in chunks
	drop    int64  // records written that are re-deliveries (removed by repair)
	ids     []byte // the open chunk's record ids, as binary array elements
	amounts []int64
	count   int // records in the open chunk
}

// held is the memory the open chunk takes.
func (c *streamContract) held() int64 { return int64(cap(c.ids) + 8*cap(c.amounts)) }

// candidate is a record id of a contract that may repeat one streamed
// before or stored: the filter says so, SQL checks it exactly.
type candidate struct {
	contract int32
	stored   bool   // a stored record id the file may repeat (else a row of the file)
	key      uint64 // recordKey
	recordID string
}

// rejectRow is an invalid row kept, with SkipInvalid, for the staging
// table (and so the reject file).
type rejectRow struct {
	line        int64
	raw, reason string
}

// streamer copies the records file into record_chunks as it reads it (see
// the package documentation, "The direct copy"). It is the io.Reader of
// one COPY statement after another: each returns io.EOF when the input
// ends or when the bases of new contracts must be read between two COPYs.
type streamer struct {
	l       *loader
	rows    *readAhead
	seed    maphash.Seed
	index   map[string]int32
	cs      []*streamContract
	last    int32   // the contract of the last row (files grouped by contract)
	lastID  string  // its id, "" before the first row
	unknown []int32 // contracts whose base is not read yet
	filter  *bloom
	keys    *keyLog // nil if no temporary file could be made

	held, heldMax int64 // memory of the open chunks, and its limit
	side, sideMax int64 // memory of rejects and re-deliveries, with candBytes, and its limit
	cands         []candidate
	candBytes     int64     // memory of cands
	candFile      *tempFile // candidates spilled (nil: none)
	rejects       []rejectRow
	maxRecords    int64 // most records (stored and new) of a contract whose gross cannot reach the limit

	// The current COPY.
	buf, pending []byte
	started      bool  // header written
	segDone      bool  // trailer written: io.EOF once pending is sent
	chunks       int64 // tuples written

	flushing bool // writing the open chunks of known contracts
	flushMin int  // of at least this many records
	// flushSkip is left open by a flush the budget forced: the contract
	// being read, whose chunk is likely to fill (a file grouped by
	// contract then keeps whole chunks).
	flushSkip *streamContract
	flushAt   int // next contract to flush
	// unknownHeld is the memory taken by records of contracts whose base
	// is not known yet; past unknownMax their bases are read.
	unknownHeld, unknownMax int64
	flushAfterRound         int  // what to flush once the bases are read
	inputEnd                bool // the records file has been read
	done                    bool // the input ended and every record is written
	rowsRead                int64
	why                     string // why the direct copy gave way (errGiveUp)
	err                     error  // ends the COPY: errGiveUp or the input's fatal error
}

func newStreamer(l *loader, budget, fileSize int64) *streamer {
	seed := maphash.MakeSeed()
	filter := budget / filterShare
	if fileSize > 0 {
		filter = min(filter, int64(float64(fileSize)*filterBytesPerFileByte))
	}
	f := newBloom(filter)
	keys, err := newKeyLog()
	if err != nil || l.opts.noKeyLog {
		keys = nil // candidates are checked in SQL alone
	}
	return &streamer{l: l, rows: newReadAhead(l.records, seed, f, keys), seed: seed, index: make(map[string]int32),
		filter: f, keys: keys, heldMax: budget * heldShare / 8, unknownMax: budget * heldShare / 64, sideMax: budget / sideShare,
		maxRecords: l.opts.maxGross / MaxAmountMinor}
}

func (s *streamer) close() {
	s.rows.close()
	if s.keys != nil {
		s.keys.close()
	}
	if s.candFile != nil {
		s.candFile.close()
	}
}

// giveUp ends the stream: the staged path is to load the file.
func (s *streamer) giveUp(why string) {
	s.why, s.err = why, errGiveUp
}

func (s *streamer) Read(p []byte) (int, error) {
	if len(s.pending) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		if s.segDone {
			return 0, io.EOF
		}
		s.fill()
		if s.err != nil {
			return 0, s.err
		}
	}
	n := copy(p, s.pending)
	s.pending = s.pending[n:]
	return n, nil
}

// startSegment readies the streamer for the next COPY.
func (s *streamer) startSegment() {
	s.started, s.segDone, s.chunks = false, false, 0
}

// endSegment ends the current COPY after what is in b.
func (s *streamer) endSegment(b []byte) []byte {
	s.segDone = true
	return binary.BigEndian.AppendUint16(b, 0xffff) // trailer
}

// fill encodes rows into buf, up to about copyEncoderChunk bytes.
func (s *streamer) fill() {
	b := s.buf[:0]
	if !s.started {
		b = append(b, binaryCopyHeader...)
		s.started = true
	}
	for len(b) < copyEncoderChunk && !s.segDone && s.err == nil {
		if s.flushing {
			for s.flushAt < len(s.cs) && (s.cs[s.flushAt].count < s.flushMin || !s.cs[s.flushAt].known || s.cs[s.flushAt] == s.flushSkip) {
				s.flushAt++
			}
			if s.flushAt < len(s.cs) {
				b = s.emit(b, s.cs[s.flushAt], s.flushMin == ChunkSize)
				s.flushAt++
				continue
			}
			s.flushing = false
			if s.inputEnd {
				s.done = true
				b = s.endSegment(b)
			}
			continue
		}
		it := s.rows.next()
		if it.err == io.EOF {
			s.inputEnd = true
			s.l.recordsProgress(s.rowsRead)
			if len(s.unknown) > 0 {
				b = s.endSegment(b) // read their bases, then flush
			} else {
				s.flush(1, nil)
			}
			continue
		}
		s.rowsRead++
		if s.rowsRead%progressEvery == 0 {
			s.l.recordsProgress(s.rowsRead)
		}
		if it.err != nil {
			var le *LineError
			if !errors.As(it.err, &le) {
				s.err = it.err
				break
			}
			if !s.l.opts.SkipInvalid {
				s.giveUp("an invalid row") // the load fails; the staged path lists every problem
				break
			}
			r := rejectRow{line: le.Line, raw: rawRow(le.Row), reason: sanitize(le.Reason)}
			s.rejects = append(s.rejects, r)
			s.addSide(int64(len(r.raw)+len(r.reason)) + 40)
			continue
		}
		b = s.add(b, &it)
	}
	s.buf, s.pending = b, b
}

// addSide counts memory kept until the end of the stream.
func (s *streamer) addSide(n int64) {
	s.side += n
	if s.side+s.candBytes > s.sideMax && s.err == nil {
		s.giveUp("too many possible repeats or rejected rows for the memory budget")
	}
}

// addCand keeps a candidate. When the candidates outgrow their share of
// the budget and the record keys are logged, they go to a temporary file
// (see confirmCandidates).
func (s *streamer) addCand(c candidate) {
	s.cands = append(s.cands, c)
	s.candBytes += int64(len(c.recordID)) + 40
	if s.side+s.candBytes <= s.sideMax {
		return
	}
	if s.keys == nil || s.spill() != nil {
		s.giveUp("too many possible repeats for the memory budget")
	}
}

// spill moves the candidates held to the candidate file.
func (s *streamer) spill() error {
	if s.candFile == nil {
		f, err := newTempFile("baton-load-*.cands")
		if err != nil {
			return err
		}
		s.candFile = f
	}
	for _, c := range s.cands {
		s.candFile.buf = binary.LittleEndian.AppendUint64(s.candFile.buf[:0], c.key)
		s.candFile.buf = binary.LittleEndian.AppendUint32(s.candFile.buf, uint32(c.contract))
		stored := uint32(0)
		if c.stored {
			stored = 1
		}
		s.candFile.buf = binary.LittleEndian.AppendUint32(s.candFile.buf, stored<<31|uint32(len(c.recordID)))
		s.candFile.buf = append(s.candFile.buf, c.recordID...)
		if _, err := s.candFile.w.Write(s.candFile.buf); err != nil {
			return err
		}
	}
	s.cands, s.candBytes = nil, 0
	return nil
}

// confirmed yields the candidates whose key the key log holds twice (a
// row of the file) or at all (a stored id), a batch at a time: the
// candidates held, or those spilled to their file, read back in batches
// of a quarter of the budget (the filter's memory is free by then), each
// checked by a read of the key log. Without a key log it yields them all.
// It returns nil at the end.
type confirmed struct {
	s    *streamer
	r    *bufio.Reader // the candidate file, if spilled
	done bool
}

func (s *streamer) confirmed() (*confirmed, error) {
	c := &confirmed{s: s}
	if s.candFile == nil {
		return c, nil
	}
	if err := s.spill(); err != nil {
		return nil, err
	}
	if err := s.candFile.rewind(); err != nil {
		return nil, err
	}
	s.filter = nil
	c.r = bufio.NewReaderSize(s.candFile.f, 1<<16)
	return c, nil
}

func (c *confirmed) next() ([]candidate, error) {
	s := c.s
	for !c.done {
		var batch []candidate
		if c.r == nil {
			batch, c.done = s.cands, true
			s.cands = nil
		} else {
			var head [16]byte
			var size int64
			for size < s.l.opts.MemoryLimit/4 {
				if _, err := io.ReadFull(c.r, head[:]); err == io.EOF {
					c.done = true
					break
				} else if err != nil {
					return nil, fmt.Errorf("reading possible repeats back: %w", err)
				}
				n := binary.LittleEndian.Uint32(head[12:])
				id := make([]byte, n&^(1<<31))
				if _, err := io.ReadFull(c.r, id); err != nil {
					return nil, fmt.Errorf("reading possible repeats back: %w", err)
				}
				batch = append(batch, candidate{key: binary.LittleEndian.Uint64(head[:]), contract: int32(binary.LittleEndian.Uint32(head[8:])),
					stored: n>>31 == 1, recordID: string(id)})
				size += int64(len(id)) + 40
			}
		}
		if err := s.confirmBatch(&batch); err != nil {
			return nil, err
		}
		if len(batch) > 0 {
			return batch, nil
		}
	}
	return nil, nil
}

// confirmBatch keeps the candidates of cands that the key log confirms.
func (s *streamer) confirmBatch(cands *[]candidate) error {
	if s.keys == nil || len(*cands) == 0 {
		return nil
	}
	counts := make(map[uint64]int, len(*cands))
	for _, c := range *cands {
		counts[c.key] = 0
	}
	if err := s.keys.count(counts); err != nil {
		return err
	}
	*cands = slices.DeleteFunc(*cands, func(c candidate) bool {
		return c.stored && counts[c.key] == 0 || !c.stored && counts[c.key] < 2
	})
	return nil
}

// add puts a valid row into its contract's open chunk, writing the chunk
// if it is full and its base known.
func (s *streamer) add(b []byte, it *readItem) []byte {
	row := &it.row
	ci, ok := s.last, s.lastID == row.ContractID && s.lastID != ""
	if !ok {
		ci, ok = s.index[row.ContractID]
	}
	if !ok {
		ci = int32(len(s.cs))
		s.index[row.ContractID] = ci
		s.cs = append(s.cs, &streamContract{id: row.ContractID, hash: maphash.String(s.seed, row.ContractID)})
		s.unknown = append(s.unknown, ci)
		s.held += int64(len(row.ContractID)) + 128
	}
	s.last, s.lastID = ci, row.ContractID
	c := s.cs[ci]
	if it.maybeSeen {
		s.addCand(candidate{contract: ci, key: it.key, recordID: row.RecordID})
	}
	before := c.held()
	c.ids = binary.BigEndian.AppendUint32(c.ids, uint32(len(row.RecordID)))
	c.ids = append(c.ids, row.RecordID...)
	c.amounts = append(c.amounts, row.AmountMinor)
	c.count++
	c.n++
	s.held += c.held() - before
	if !c.known {
		s.unknownHeld += c.held() - before
	}
	if c.known && c.base+c.n > s.maxRecords {
		s.giveUp(fmt.Sprintf("contract %s may reach the gross limit", c.id))
		return b
	}
	if c.known && c.count >= ChunkSize {
		b = s.emit(b, c, true)
	}
	var skip *streamContract
	if c.held() < s.heldMax/2 {
		skip = c
	}
	switch {
	case s.held > s.heldMax && len(s.unknown) > 0:
		s.flushAfterRound, s.flushSkip = 1, skip
		return s.endSegment(b) // read their bases, then flush
	case s.held > s.heldMax:
		s.flush(1, skip)
	case s.unknownHeld > s.unknownMax:
		// Read their bases, then write their full chunks. Without this
		// a file of few contracts would be read to the end, or to the
		// budget, before the first chunk is written, and the server
		// would wait meanwhile.
		s.flushAfterRound, s.flushSkip = ChunkSize, nil
		return s.endSegment(b)
	}
	return b
}

// flush starts writing the open chunks of known contracts that hold at
// least least records, but skip's.
func (s *streamer) flush(least int, skip *streamContract) {
	s.flushing, s.flushMin, s.flushAt, s.flushSkip = true, least, 0, skip
}

// emit writes the open chunk of a contract whose base is known, as tuples
// of up to ChunkSize records, and releases its memory; with whole, only
// full chunks are written and the rest stays open.
func (s *streamer) emit(b []byte, c *streamContract, whole bool) []byte {
	ids, amounts := c.ids, c.amounts
	for len(amounts) >= ChunkSize || !whole && len(amounts) > 0 {
		k := min(len(amounts), ChunkSize)
		size := 0
		for range k {
			size += 4 + int(binary.BigEndian.Uint32(ids[size:]))
		}
		first := c.base + c.emitted + 1
		b = binary.BigEndian.AppendUint16(b, 6)
		b = appendText(b, c.id)
		b = appendInt8(b, first)
		b = appendInt8(b, first+int64(k)-1)
		b = appendInt8(b, s.l.rep.LoadID)
		b = appendArrayHeader(b, 20+size, oidText, k)
		b = append(b, ids[:size]...)
		b = appendArrayHeader(b, 20+12*k, oidInt8, k)
		for _, a := range amounts[:k] {
			b = appendInt8(b, a)
		}
		ids, amounts = ids[size:], amounts[k:]
		c.emitted += int64(k)
		c.count -= k
		s.chunks++
	}
	s.held -= c.held()
	c.ids, c.amounts = nil, nil
	if len(amounts) > 0 {
		c.ids, c.amounts = slices.Clone(ids), slices.Clone(amounts)
		s.held += c.held()
	}
	return b
}

// readBases reads tasks.available of the contracts first named since the
// last time. It returns false if one of them does not exist (the staged
// path reports its rows).
func (s *streamer) readBases(ctx context.Context, tx pgx.Tx) (bool, error) {
	ids := make([]string, len(s.unknown))
	for i, c := range s.unknown {
		ids[i] = s.cs[c].id
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
		ci, ok := s.index[id]
		if !ok {
			return fmt.Errorf("unexpected contract %q", id)
		}
		c := s.cs[ci]
		c.base, c.known = base, true
		found++
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("checking contracts: %w", err)
	}
	if found < len(s.unknown) {
		for _, ci := range s.unknown {
			if !s.cs[ci].known {
				s.giveUp(fmt.Sprintf("unknown contract %s", s.cs[ci].id))
				break
			}
		}
		return false, nil
	}
	for _, ci := range s.unknown {
		if c := s.cs[ci]; c.base+c.n > s.maxRecords {
			s.giveUp(fmt.Sprintf("contract %s may reach the gross limit", c.id))
			return false, nil
		}
	}
	s.unknown, s.unknownHeld = s.unknown[:0], 0
	return true, nil
}

// streamRecords loads the records file by the direct copy, under a
// savepoint. It returns false, having changed nothing, when the staged
// path must load the file instead (Report.DirectCopy tells which ran).
func (l *loader) streamRecords(ctx context.Context, tx pgx.Tx, s *streamer) (bool, error) {
	sp, err := tx.Begin(ctx) // a savepoint
	if err != nil {
		return false, fmt.Errorf("setting a savepoint: %w", err)
	}
	defer func() { _ = sp.Rollback(ctx) }() // a no-op after Commit
	ok, err := l.stream(ctx, sp, s)
	if err != nil || !ok {
		if rerr := sp.Rollback(ctx); rerr != nil && err == nil {
			err = fmt.Errorf("rolling back to the savepoint: %w", rerr)
		}
		return false, err
	}
	if err := sp.Commit(ctx); err != nil {
		return false, fmt.Errorf("releasing the savepoint: %w", err)
	}
	l.rep.DirectCopy = true
	return true, nil
}

func (l *loader) stream(ctx context.Context, tx pgx.Tx, s *streamer) (bool, error) {
	sql := "COPY " + schema.Ident(l.opts.Schema) +
		".record_chunks (contract_id, first_seq, last_seq, load_id, record_ids, amounts) FROM STDIN (FORMAT binary)"
	for {
		s.startSegment()
		tag, err := tx.Conn().PgConn().CopyFrom(ctx, s, sql)
		switch {
		case errors.Is(s.err, errGiveUp):
			return false, nil
		case s.err != nil:
			return false, s.err
		case isUniqueViolation(err):
			// A record stored through the records view without raising
			// available took a seq this load would give. The staged path
			// finds out whether the load only re-delivers it, and fails
			// as it always did otherwise.
			s.giveUp("a seq the load would give is taken")
			return false, nil
		case err != nil:
			return false, fmt.Errorf("storing records: %w", err)
		case tag.RowsAffected() != s.chunks:
			return false, fmt.Errorf("storing records: stored %d chunks, want %d", tag.RowsAffected(), s.chunks)
		}
		if s.done {
			break
		}
		// The input ended or the budget filled with records of contracts
		// whose base is not known yet: read them, then write every open
		// chunk.
		if ok, err := s.readBases(ctx, tx); err != nil || !ok {
			return false, err
		}
		if s.inputEnd {
			s.flush(1, nil)
		} else {
			s.flush(s.flushAfterRound, s.flushSkip)
		}
	}
	l.rowsRead += s.rowsRead
	l.stage(StageValidating)
	if err := s.probeStored(ctx, tx); err != nil || s.err != nil {
		return false, err
	}
	redelivered, ok, err := s.checkCandidates(ctx, tx)
	if err != nil || !ok {
		return false, err
	}
	l.stage(StageInserting)
	if len(redelivered) > 0 {
		if err := s.repair(ctx, tx, redelivered); err != nil {
			return false, err
		}
	}
	if len(s.rejects) > 0 {
		if err := s.stageRejects(ctx, tx); err != nil {
			return false, err
		}
	}
	// What the staged path's load_affected holds, from the counts.
	order := make([]*streamContract, 0, len(s.cs))
	for _, c := range s.cs {
		if c.n-c.drop > 0 {
			order = append(order, c)
		}
	}
	// Go compares strings bytewise, as the "C" collation of contract_id does.
	slices.SortFunc(order, func(x, y *streamContract) int {
		if x.id < y.id {
			return -1
		}
		return 1
	})
	names := make([]string, len(order))
	news := make([]int64, len(order))
	bases := make([]int64, len(order))
	var accepted, dropped int64
	for i, c := range order {
		names[i], news[i], bases[i] = c.id, c.n-c.drop, c.base
		accepted += c.n - c.drop
	}
	for _, c := range s.cs {
		dropped += c.drop
	}
	if _, err := exec(ctx, tx, "collecting contracts", sqlAffectedDirect, names, news, bases); err != nil {
		return false, err
	}
	if _, err := exec(ctx, tx, "creating task rows", sqlRecordTasks); err != nil {
		return false, err
	}
	l.rep.RecordsAccepted, l.rep.RecordsRedelivered = accepted, dropped
	return true, nil
}

// probeStored looks for record ids of the file among the stored ones of
// the contracts that have records already: their ids are read (in binary)
// and tested against the filter; those it may hold become candidates.
// Its cost follows the records stored for the contracts the file touches.
func (s *streamer) probeStored(ctx context.Context, tx pgx.Tx) error {
	var withRecords []string
	for _, c := range s.cs {
		if c.base > 0 {
			withRecords = append(withRecords, c.id)
		}
	}
	if len(withRecords) == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, `SELECT contract_id, record_ids FROM {{.Schema}}.record_chunks WHERE contract_id = ANY($1::text[]) AND load_id <> $2`,
		pgx.QueryExecModeDescribeExec, pgx.QueryResultFormats{pgx.BinaryFormatCode}, withRecords, s.l.rep.LoadID)
	if err != nil {
		return fmt.Errorf("reading stored record ids: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		raw := rows.RawValues()
		ci, known := s.index[string(raw[0])]
		if !known {
			return fmt.Errorf("reading stored record ids: unexpected contract %q", raw[0])
		}
		c := s.cs[ci]
		err := eachArrayElem(raw[1], func(id []byte) {
			if key := recordKey(c.hash, maphash.Bytes(s.seed, id)); s.err == nil && s.filter.has(key) {
				s.addCand(candidate{contract: ci, stored: true, key: key, recordID: string(id)})
			}
		})
		if err != nil {
			return fmt.Errorf("reading stored record ids of contract %s: %w", raw[0], err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading stored record ids: %w", err)
	}
	return nil
}

// redelivery is a record this load wrote that repeats an earlier one
// with the same amount: it is removed again by repair.
type redelivery struct {
	contract string
	seq      int64
}

// sqlCandidateRecords finds every record, stored or of this load, whose id
// is a candidate of its contract. A chunk is unnested only if it holds the
// id; only the chunks of the candidates' contracts are read.
const sqlCandidateRecords = `
SELECT k.contract_id, k.record_id, c.first_seq + u.i - 1, u.amount_minor, c.load_id
  FROM (SELECT DISTINCT contract_id, record_id FROM load_candidates) k
  JOIN {{.Schema}}.record_chunks c ON c.contract_id = k.contract_id AND k.record_id = ANY (c.record_ids)
 CROSS JOIN LATERAL unnest(c.record_ids, c.amounts) WITH ORDINALITY AS u (record_id, amount_minor, i)
 WHERE u.record_id = k.record_id
 ORDER BY 1, 2, 3`

// checkCandidates settles the candidates exactly, in SQL. A record id
// that occurs more than once in its contract (stored, or earlier in the
// file) is a re-delivery if its amount is the first occurrence's: it is
// returned, to be removed. With another amount the load gives way to the
// staged path, which reports the error with both lines (ok is false).
func (s *streamer) checkCandidates(ctx context.Context, tx pgx.Tx) (redelivered []redelivery, ok bool, err error) {
	if len(s.cands) == 0 && s.candFile == nil {
		return nil, true, nil
	}
	if _, err := exec(ctx, tx, "checking possible repeats", `
CREATE TEMP TABLE load_candidates (contract_id text COLLATE "C" NOT NULL, record_id text COLLATE "C" NOT NULL) ON COMMIT DROP`); err != nil {
		return nil, false, err
	}
	// The candidates are confirmed while they are copied, so that the
	// session is busy in the COPY rather than idle in the transaction
	// (past the idle timeout) while the key log is read.
	batches, err := s.confirmed()
	if err != nil {
		return nil, false, err
	}
	vals := make([]any, 2)
	var (
		batch []candidate
		i     int
		n     int64
	)
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"load_candidates"}, []string{"contract_id", "record_id"},
		pgx.CopyFromFunc(func() ([]any, error) {
			for i == len(batch) {
				b, err := batches.next()
				if err != nil || b == nil {
					return nil, err
				}
				batch, i = b, 0
			}
			vals[0], vals[1] = s.cs[batch[i].contract].id, batch[i].recordID
			i++
			n++
			return vals, nil
		})); err != nil {
		return nil, false, fmt.Errorf("checking possible repeats: %w", err)
	}
	if n == 0 {
		return nil, true, nil
	}
	if err := analyze(ctx, tx, "load_candidates", "contract_id"); err != nil {
		return nil, false, err
	}
	rows, err := tx.Query(ctx, sqlCandidateRecords)
	if err != nil {
		return nil, false, fmt.Errorf("checking possible repeats: %w", err)
	}
	var (
		contract, id           string
		seq, amount, loadID    int64
		lastContract, lastID   string
		firstAmount            int64
		haveFirst, otherAmount bool
	)
	_, err = pgx.ForEachRow(rows, []any{&contract, &id, &seq, &amount, &loadID}, func() error {
		if !haveFirst || contract != lastContract || id != lastID {
			lastContract, lastID, firstAmount, haveFirst = contract, id, amount, true
			return nil
		}
		if loadID != s.l.rep.LoadID {
			return fmt.Errorf("record id %q of contract %s is stored twice", id, contract)
		}
		if amount != firstAmount {
			otherAmount = true
			return nil
		}
		redelivered = append(redelivered, redelivery{contract, seq})
		s.cs[s.index[contract]].drop++
		s.addSide(int64(len(contract)) + 24)
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("checking possible repeats: %w", err)
	}
	if otherAmount {
		s.giveUp("a record id repeated with another amount")
		return nil, false, nil
	}
	return redelivered, s.err == nil, nil
}

// sqlRepairChunks rewrites this load's chunks of the contracts with
// re-deliveries without them: the chunks are deleted (into load_repair),
// and their records less the re-delivered ones numbered again from the
// contract's base and cut into chunks of $2 as any load's.
const sqlRepairChunks = `
CREATE TEMP TABLE load_repair ON COMMIT DROP AS
SELECT contract_id, first_seq, record_ids, amounts FROM {{.Schema}}.record_chunks WHERE false;
CREATE TEMP TABLE load_skip (contract_id text COLLATE "C" NOT NULL, seq bigint NOT NULL) ON COMMIT DROP`

const sqlRepairDelete = `
WITH old AS (
    DELETE FROM {{.Schema}}.record_chunks c
     WHERE c.load_id = $1 AND c.contract_id IN (SELECT DISTINCT contract_id FROM load_skip)
    RETURNING c.contract_id, c.first_seq, c.record_ids, c.amounts
)
INSERT INTO load_repair SELECT * FROM old`

const sqlRepairInsert = `
WITH kept AS (
    SELECT r.contract_id, min(r.first_seq) OVER (PARTITION BY r.contract_id) - 1 AS base, u.record_id, u.amount_minor,
           r.first_seq + u.i - 1 AS seq
      FROM load_repair r
     CROSS JOIN LATERAL unnest(r.record_ids, r.amounts) WITH ORDINALITY AS u (record_id, amount_minor, i)
), numbered AS (
    SELECT contract_id, base, record_id, amount_minor,
           row_number() OVER (PARTITION BY contract_id ORDER BY seq) AS k
      FROM kept
     WHERE NOT EXISTS (SELECT 1 FROM load_skip s WHERE s.contract_id = kept.contract_id AND s.seq = kept.seq)
)
INSERT INTO {{.Schema}}.record_chunks (contract_id, first_seq, last_seq, load_id, record_ids, amounts)
SELECT contract_id, base + min(k), base + max(k), $1, array_agg(record_id ORDER BY k), array_agg(amount_minor ORDER BY k)
  FROM numbered
 GROUP BY contract_id, base, (k - 1) / $2::bigint
 ORDER BY contract_id, min(k)`

// repair removes the re-delivered records from this load's chunks of
// their contracts (only those contracts' chunks of this load are read and
// written again).
func (s *streamer) repair(ctx context.Context, tx pgx.Tx, redelivered []redelivery) error {
	if _, err := exec(ctx, tx, "removing re-delivered records", sqlRepairChunks); err != nil {
		return err
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"load_skip"}, []string{"contract_id", "seq"},
		pgx.CopyFromSlice(len(redelivered), func(i int) ([]any, error) {
			return []any{redelivered[i].contract, redelivered[i].seq}, nil
		})); err != nil {
		return fmt.Errorf("removing re-delivered records: %w", err)
	}
	if err := analyze(ctx, tx, "load_skip", "contract_id"); err != nil {
		return err
	}
	if _, err := exec(ctx, tx, "removing re-delivered records", sqlRepairDelete, s.l.rep.LoadID); err != nil {
		return err
	}
	_, err := exec(ctx, tx, "removing re-delivered records", sqlRepairInsert, s.l.rep.LoadID, ChunkSize)
	return err
}

// stageRejects copies the rows rejected on their own into load_records,
// for the count, the error and the reject file.
func (s *streamer) stageRejects(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.CopyFrom(ctx, pgx.Identifier{"load_records"}, []string{"line", "raw", "err"},
		pgx.CopyFromSlice(len(s.rejects), func(i int) ([]any, error) {
			r := &s.rejects[i]
			return []any{r.line, r.raw, r.reason}, nil
		}))
	if err != nil {
		return fmt.Errorf("copying rejected rows to the database: %w", err)
	}
	s.rejects = nil
	return nil
}

func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// countReader counts the bytes read through it, for progress reports
// from another goroutine.
type countReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}
