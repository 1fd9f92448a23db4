package ingest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"slices"
	"strings"
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

// How the stream divides its memory budget: the records held in open
// chunks (half), the rest kept until the stream ends (rejected rows,
// re-deliveries to remove: an eighth), the keys of the records (keySet: a
// quarter while the file is read, half once it has been) and the write
// buffers of the spill files (chunkSpill: a sixteenth).
const (
	heldShare = 4 // 4/8 of the budget
	sideShare = 8 // 1/8
)

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
	// spilled: records of the contract wait in the spill files, so all
	// its later ones go there too (seqs follow the file's order).
	spilled bool
}

// held is the memory the open chunk takes.
func (c *streamContract) held() int64 { return int64(cap(c.ids) + 8*cap(c.amounts)) }

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
	unknown []int32 // contracts whose base is not read yet
	keys    *keySet // every valid row's key, and the stored records' of the contracts named

	held, heldMax int64 // memory of the open chunks, and its limit
	heldPeak      int64 // the most held (tests)
	side, sideMax int64 // memory of rejects and re-deliveries, and its limit
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
	// spill holds the open chunks that did not fit, read back into
	// whole chunks after the file (nil until needed); noSpill: no
	// temporary file could be made, so open chunks are written early
	// (partial) instead.
	spill       *chunkSpill
	noSpill     bool
	readingBack bool
	partDone    bool // the spill file being read back has been read
	budget      int64
	why         string // why the direct copy gave way (errGiveUp)
	err         error  // ends the COPY: errGiveUp or the input's fatal error
}

func newStreamer(l *loader, budget, fileSize int64) *streamer {
	s := &streamer{l: l, seed: maphash.MakeSeed(), index: make(map[string]int32),
		heldMax: budget * heldShare / 8, unknownMax: budget * heldShare / 64, sideMax: budget / sideShare,
		maxRecords: l.opts.maxGross / MaxAmountMinor, budget: budget}
	// The keys expected in all, from those of the file read so far: the
	// keys of stored records, added after the file, are not foreseen
	// (a bucket they make too large for memory is split again).
	s.keys = newKeySet(budget, func(n int64) int64 {
		read := l.recordsRead.n.Load()
		if s.inputEnd || read <= 0 || fileSize <= read {
			return 2 * n
		}
		return int64(float64(n) * float64(fileSize) / float64(read))
	})
	s.keys.noFile = l.opts.noTempFile
	// The reading goroutine numbers the contracts (in order of first
	// appearance, as add meets them) and hashes each once, so that the
	// goroutine writing the chunks looks up no contract id.
	type contractOrd struct {
		n    int32
		hash uint64
	}
	ords := make(map[string]contractOrd)
	key := func(contractID, recordID string, recordHash uint64) (uint64, int32) {
		o, ok := ords[contractID]
		if !ok {
			o = contractOrd{int32(len(ords)), maphash.String(s.seed, contractID)}
			ords[strings.Clone(contractID)] = o
		}
		if l.opts.recordKey != nil {
			return l.opts.recordKey(contractID, recordID), o.n
		}
		return recordKey(o.hash, recordHash), o.n
	}
	s.rows = newReadAhead(l.records, s.seed, key)
	return s
}

func (s *streamer) close() {
	s.rows.close()
	s.keys.close()
	if s.spill != nil {
		s.spill.close()
	}
}

// storedKey is the key of a stored record id of contract c.
func (s *streamer) storedKey(c *streamContract, id []byte) uint64 {
	if s.l.opts.recordKey != nil {
		return s.l.opts.recordKey(c.id, string(id))
	}
	return recordKey(c.hash, maphash.Bytes(s.seed, id))
}

// addKey adds a record's key to the key set; the direct copy gives way if
// the set cannot hold it (no temporary file).
func (s *streamer) addKey(e keyEntry) {
	if s.keys.add(e); s.keys.err != nil && s.err == nil {
		s.giveUp(s.keys.err.Error())
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
				if c := s.cs[s.flushAt]; c.spilled && !s.readingBack {
					s.spillChunk(c)
				} else {
					b = s.emit(b, c, s.flushMin == ChunkSize)
				}
				s.flushAt++
				continue
			}
			s.flushing = false
			if s.inputEnd {
				if s.readingBack && !s.partDone {
					continue // written early, amid a spill file
				}
				if s.spill != nil && s.nextPart() {
					continue
				}
				if s.err != nil {
					break
				}
				s.done = true
				b = s.endSegment(b)
			}
			continue
		}
		if s.readingBack {
			b = s.readBack(b)
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
	if s.side > s.sideMax && s.err == nil {
		s.giveUp("too many rejected rows or re-deliveries for the memory budget")
	}
}

// add puts a valid row into its contract's open chunk, writing the chunk
// if it is full and its base known.
func (s *streamer) add(b []byte, it *readItem) []byte {
	row := &it.row
	ci := it.contract
	switch {
	case int(ci) == len(s.cs):
		s.index[row.ContractID] = ci
		s.cs = append(s.cs, &streamContract{id: row.ContractID, hash: maphash.String(s.seed, row.ContractID)})
		s.unknown = append(s.unknown, ci)
		s.held += int64(len(row.ContractID)) + 128
	case ci < 0 || int(ci) > len(s.cs) || s.cs[ci].id != row.ContractID:
		s.err = fmt.Errorf("internal error: contract %s numbered %d", row.ContractID, ci)
		return b
	}
	c := s.cs[ci]
	if c.n >= storedPos {
		s.giveUp(fmt.Sprintf("contract %s has too many records", c.id)) // more than the gross limit allows anyway
		return b
	}
	s.addKey(keyEntry{key: it.key, contract: uint32(ci), pos: uint32(c.n)})
	if c.spilled && c.count == 0 {
		// Its records go to the spill file as they come, without an
		// open chunk: once contracts spill they are many, and writing
		// a row takes less than keeping it.
		c.n++
		if err := s.spill.writeRow(c.hash, ci, row.RecordID, row.AmountMinor); err != nil {
			s.err = fmt.Errorf("writing a temporary file of records: %w", err)
		}
		if c.known && c.base+c.n > s.maxRecords {
			s.giveUp(fmt.Sprintf("contract %s may reach the gross limit", c.id))
		}
		return b
	}
	before := c.held()
	c.ids = binary.BigEndian.AppendUint32(c.ids, uint32(len(row.RecordID)))
	c.ids = append(c.ids, row.RecordID...)
	c.amounts = append(c.amounts, row.AmountMinor)
	c.count++
	c.n++
	s.held += c.held() - before
	s.heldPeak = max(s.heldPeak, s.held)
	if !c.known {
		s.unknownHeld += c.held() - before
	}
	if c.known && c.base+c.n > s.maxRecords {
		s.giveUp(fmt.Sprintf("contract %s may reach the gross limit", c.id))
		return b
	}
	switch {
	case c.spilled && c.count >= ChunkSize:
		s.spillChunk(c)
	case c.known && c.count >= ChunkSize:
		b = s.emit(b, c, true)
	}
	var skip *streamContract
	if c.held() < s.heldMax/2 {
		skip = c
	}
	switch {
	case s.held > s.heldMax && s.canSpill():
		s.spillAll(skip)
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

// canSpill makes the spill files if they are not made yet; false if
// they cannot be.
func (s *streamer) canSpill() bool {
	if s.spill != nil {
		return true
	}
	if s.noSpill {
		return false
	}
	sp, err := newChunkSpill(s.budget, s.l.opts.noTempFile)
	if err != nil {
		s.noSpill = true
		return false
	}
	s.spill = sp
	return true
}

// spillAll moves every open chunk but skip's to the spill files.
func (s *streamer) spillAll(skip *streamContract) {
	for _, c := range s.cs {
		if c.count > 0 && c != skip {
			s.spillChunk(c)
			if s.err != nil {
				return
			}
		}
	}
}

// spillChunk moves a contract's open chunk to the spill files.
func (s *streamer) spillChunk(c *streamContract) {
	if c.count == 0 {
		return
	}
	if err := s.spill.write(c.hash, s.index[c.id], c.count, c.ids, c.amounts); err != nil {
		s.err = fmt.Errorf("writing a temporary file of records: %w", err)
		return
	}
	h := c.held()
	s.held -= h
	if !c.known {
		s.unknownHeld = max(0, s.unknownHeld-h)
	}
	c.ids, c.amounts, c.count, c.spilled = nil, nil, 0, true
}

// nextPart starts reading back the next spill file, true if there is
// one.
func (s *streamer) nextPart() bool {
	more, err := s.spill.nextPart()
	if err != nil {
		s.err = fmt.Errorf("reading a temporary file of records: %w", err)
		return false
	}
	s.readingBack, s.partDone = more, false
	return more
}

// readBack adds the next block of the spill file being read to its
// contract's open chunk, writing the chunk once full; at the file's end
// every open chunk (of that file's contracts) is written.
func (s *streamer) readBack(b []byte) []byte {
	cur, err := s.spill.readBlock(s.cs)
	if err == io.EOF {
		s.partDone = true
		s.flush(1, nil)
		return b
	}
	if err != nil {
		s.err = fmt.Errorf("reading a temporary file of records: %w", err)
		return b
	}
	before := cur.held()
	err = s.spill.append(cur)
	s.held += cur.held() - before
	s.heldPeak = max(s.heldPeak, s.held)
	if err != nil {
		s.err = fmt.Errorf("reading a temporary file of records: %w", err)
		return b
	}
	if cur.count >= ChunkSize {
		b = s.emit(b, cur, true)
	}
	if s.held > s.heldMax {
		// The file's contracts do not fit: write their chunks as they are.
		s.flush(1, nil)
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
	sql := "COPY " + schema.Ident(l.opts.schema) +
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
	redelivered, ok, err := s.checkRepeats(ctx, tx)
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

// probeStored adds to the key set the keys of the stored records of the
// contracts the file names that have records already, and of their pruned
// records (pruned_chunks): their ids are read (in binary), hashed and
// added, not held. Its cost follows the records stored and pruned for the
// contracts the file touches.
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
	rows, err := tx.Query(ctx, `
SELECT contract_id, record_ids FROM {{.Schema}}.record_chunks WHERE contract_id = ANY($1::text[]) AND load_id <> $2
 UNION ALL
SELECT contract_id, record_ids FROM {{.Schema}}.pruned_chunks WHERE contract_id = ANY($1::text[])`,
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
			// A key no file row has cannot make a repeat: most stored
			// and pruned ids stop here, and the key set holds only the
			// few that may.
			if k := s.storedKey(c, id); s.keys.mayRepeat(k) {
				s.addKey(keyEntry{key: k, contract: uint32(ci), pos: storedPos})
			}
		})
		if err != nil {
			return fmt.Errorf("reading stored record ids of contract %s: %w", raw[0], err)
		}
		if s.err != nil {
			return nil
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

// sqlCandidateTables makes the tables of the rows whose key repeats: their
// seqs (from the key set), then their record ids (sqlCandidateIDs).
const sqlCandidateTables = `
CREATE TEMP TABLE load_candidate_seqs (contract_id text COLLATE "C" NOT NULL, seq bigint NOT NULL) ON COMMIT DROP;
CREATE TEMP TABLE load_candidates (contract_id text COLLATE "C" NOT NULL, record_id text COLLATE "C" NOT NULL) ON COMMIT DROP`

// candidatesAnalyzed is what ANALYZE of load_candidates reads: both
// columns, for the count of distinct candidates, which picks the join to
// the pruned records.
const candidatesAnalyzed = "contract_id, record_id"

// sqlCandidateIDs takes the record ids of the rows whose key repeats, from
// the chunks this load wrote (by their seqs, each in the one chunk that
// holds it).
const sqlCandidateIDs = `
INSERT INTO load_candidates (contract_id, record_id)
SELECT DISTINCT k.contract_id, c.record_ids[k.seq - c.first_seq + 1]
  FROM load_candidate_seqs k
  JOIN {{.Schema}}.record_chunks c ON c.contract_id = k.contract_id AND c.first_seq BETWEEN k.seq - $1::bigint + 1 AND k.seq
 WHERE k.seq <= c.last_seq`

// sqlCandidateRecords finds every record, stored, pruned or of this load,
// whose id is a candidate of its contract, with whether it was pruned. The
// stored chunks of the candidates' contracts are searched in place for
// each candidate's id (array_positions: every place it holds it, as a
// chunk of this load may repeat an id), not unnested. The pruned chunks of those contracts are
// unnested once, in a materialized CTE, and joined to the candidates by
// hash: a chunk is read once however many candidates it is searched for,
// so the cost follows the contracts' pruned records, not their product
// with the candidates. Written as a plain join, the planner (which
// estimates 10 elements an array, and 200 candidates when only
// contract_id was analyzed) joined each pruned chunk to every candidate of
// its contract first and unnested it once per pair: a pruned file of 1,571
// records loaded again, against some 6,000 pruned records a contract, took
// this statement 5.4 s (31,816 chunks unnested, 9.4 million ids compared;
// 60 ms once each chunk is unnested once), and on the fault soak's busy
// machine longer than its database stayed up between restarts (10 to 25
// s), so that the load failed at every attempt.
const sqlCandidateRecords = `
WITH pruned AS MATERIALIZED (
    SELECT p.contract_id, p.first_seq + u.i - 1 AS seq, u.record_id, u.amount_minor, p.load_id
      FROM {{.Schema}}.pruned_chunks p
     CROSS JOIN LATERAL unnest(p.record_ids, p.amounts) WITH ORDINALITY AS u (record_id, amount_minor, i)
     WHERE p.contract_id IN (SELECT contract_id FROM load_candidates)
)
SELECT k.contract_id, k.record_id, c.first_seq + u.i - 1, c.amounts[u.i], c.load_id, false
  FROM (SELECT DISTINCT contract_id, record_id FROM load_candidates) k
  JOIN {{.Schema}}.record_chunks c ON c.contract_id = k.contract_id
 CROSS JOIN LATERAL unnest(array_positions(c.record_ids, k.record_id)) AS u (i)
UNION ALL
SELECT k.contract_id, k.record_id, x.seq, x.amount_minor, x.load_id, true
  FROM pruned x
  JOIN (SELECT DISTINCT contract_id, record_id FROM load_candidates) k ON k.contract_id = x.contract_id AND k.record_id = x.record_id
 ORDER BY 1, 2, 3`

// checkRepeats finds the record ids that occur more than once in their
// contract (stored, or earlier in the file): the key set yields the rows
// whose key repeats, and SQL settles them exactly (a 64-bit key may be
// shared by two record ids). A repeat is a re-delivery if its amount is
// the first occurrence's: it is returned, to be removed. With another
// amount the load gives way to the staged path, which reports the error
// with both lines (ok is false).
func (s *streamer) checkRepeats(ctx context.Context, tx pgx.Tx) (redelivered []redelivery, ok bool, err error) {
	if _, err := exec(ctx, tx, "checking repeated record ids", sqlCandidateTables); err != nil {
		return nil, false, err
	}
	// The keys are grouped while the rows found are copied, so that the
	// session is busy in the COPY rather than idle in the transaction
	// (past the idle timeout) while the key set's buckets are read.
	found, err := s.keys.repeats()
	if err != nil {
		s.giveUp(err.Error())
		return nil, false, nil
	}
	vals := make([]any, 2)
	var (
		batch []keyEntry
		i     int
		n     int64
	)
	_, err = tx.CopyFrom(ctx, pgx.Identifier{"load_candidate_seqs"}, []string{"contract_id", "seq"},
		pgx.CopyFromFunc(func() ([]any, error) {
			for i == len(batch) {
				b, err := found.next()
				if err != nil {
					s.giveUp(err.Error())
					return nil, errGiveUp
				}
				if b == nil {
					return nil, nil
				}
				batch, i = b, 0
			}
			c := s.cs[batch[i].contract]
			vals[0], vals[1] = c.id, c.base+int64(batch[i].pos)+1
			i++
			n++
			return vals, nil
		}))
	switch {
	case errors.Is(s.err, errGiveUp):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("checking repeated record ids: %w", err)
	case n == 0:
		return nil, true, nil
	}
	if err := analyze(ctx, tx, "load_candidate_seqs", "contract_id"); err != nil {
		return nil, false, err
	}
	if _, err := exec(ctx, tx, "checking repeated record ids", sqlCandidateIDs, ChunkSize); err != nil {
		return nil, false, err
	}
	if err := analyze(ctx, tx, "load_candidates", candidatesAnalyzed); err != nil {
		return nil, false, err
	}
	rows, err := tx.Query(ctx, sqlCandidateRecords)
	if err != nil {
		return nil, false, fmt.Errorf("checking repeated record ids: %w", err)
	}
	var (
		contract, id           string
		seq, amount, loadID    int64
		pruned                 bool
		lastContract, lastID   string
		firstAmount            int64
		haveFirst, otherAmount bool
	)
	_, err = pgx.ForEachRow(rows, []any{&contract, &id, &seq, &amount, &loadID, &pruned}, func() error {
		if !haveFirst || contract != lastContract || id != lastID {
			lastContract, lastID, firstAmount, haveFirst = contract, id, amount, true
			return nil
		}
		if loadID != s.l.rep.LoadID || pruned {
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
		return nil, false, fmt.Errorf("checking repeated record ids: %w", err)
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
