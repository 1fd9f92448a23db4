package ingest

import (
	"errors"
	"hash/maphash"
	"io"
)

// readAhead reads the rows of a records file ahead of the loader, in
// batches, in two goroutines: one parses the CSV, the other applies the
// single-row checks to the rows parsed before, while the loader holds or
// stages the rows checked before those. Parsing and checking, most of the
// loader's CPU while it reads, then run beside the rest instead of before
// it. Rows come out in file order with the results Next would have given
// them.
type readAhead struct {
	parsed  chan *parsedBatch
	spare   chan *parsedBatch // parsed batches checked, for reuse
	batches chan []readItem
	free    chan []readItem // batches read, for reuse
	stop    chan struct{}
	done    chan struct{} // both goroutines have ended
	cur     []readItem
	i       int
	end     error // io.EOF or the fatal error that ended the reading
}

// readItem is what RecordsReader.Next returned for one row, and the
// staging raw column of a valid row whose amount is not written
// canonically.
type readItem struct {
	row  RecordRow
	err  error
	raw  string
	hash uint64 // of a valid row's record id
	key  uint64 // of a valid row's record id within its contract, when keys are made
	// contract is the ordinal of a valid row's contract among the
	// contracts of the valid rows, in order of first appearance, when
	// keys are made.
	contract int32
}

// parsedBatch is what csvFile.next returned for a batch of rows.
type parsedBatch struct {
	fields []string // the rows' fields, back to back
	ends   []int    // where each row's fields end in fields
	lines  []int64
	errs   []error
}

func (p *parsedBatch) reset() {
	clear(p.fields) // drop the strings
	clear(p.errs)
	p.fields, p.ends, p.lines, p.errs = p.fields[:0], p.ends[:0], p.lines[:0], p.errs[:0]
}

const readAheadBatch = 1024

// final reports whether err ends the reading: io.EOF or a fatal error,
// which csvFile.next would return again.
func final(err error) bool { return err != nil && !isLineError(err) }

// With a key function, the checking goroutine also gives each valid row
// its key and contract ordinal (readItem.key, readItem.contract).
func newReadAhead(r *RecordsReader, seed maphash.Seed, key func(contractID, recordID string, recordHash uint64) (uint64, int32)) *readAhead {
	a := &readAhead{parsed: make(chan *parsedBatch, 4), spare: make(chan *parsedBatch, 8),
		batches: make(chan []readItem, 4), free: make(chan []readItem, 8),
		stop: make(chan struct{}), done: make(chan struct{})}
	parsing := make(chan struct{})
	go func() { // parse
		defer close(parsing)
		defer close(a.parsed)
		b := new(parsedBatch)
		for {
			fields, line, err := r.f.next()
			b.fields = append(b.fields, fields...)
			b.ends = append(b.ends, len(b.fields))
			b.lines = append(b.lines, line)
			b.errs = append(b.errs, err)
			if len(b.lines) < readAheadBatch && !final(err) {
				continue
			}
			select {
			case a.parsed <- b:
			case <-a.stop:
				return
			}
			if final(err) {
				return
			}
			select {
			case b = <-a.spare:
				b.reset()
			default:
				b = new(parsedBatch)
			}
		}
	}()
	go func() { // check
		defer close(a.done)
		defer func() { <-parsing }()
		defer close(a.batches)
		for p := range a.parsed {
			var batch []readItem
			select {
			case batch = <-a.free:
				batch = batch[:0]
			default:
				batch = make([]readItem, 0, readAheadBatch)
			}
			from := 0
			for i, end := range p.ends {
				fields := p.fields[from:end:end]
				from = end
				row, err := r.check(fields, p.lines[i], p.errs[i])
				it := readItem{row: row, err: err}
				if err == nil {
					// Hashed here, while the id is in the cache, for the
					// direct copy's check for repeats.
					it.hash = maphash.String(seed, row.RecordID)
					if key != nil {
						it.key, it.contract = key(row.ContractID, row.RecordID, it.hash)
					}
					if !canonicalInt(fields[2]) {
						it.raw = rawRow(fields)
					}
				}
				batch = append(batch, it)
			}
			select {
			case a.spare <- p:
			default:
			}
			select {
			case a.batches <- batch:
			case <-a.stop:
				return
			}
		}
	}()
	return a
}

// next returns the next row's results. After the end it returns io.EOF or
// the fatal error again.
func (a *readAhead) next() readItem {
	for a.i == len(a.cur) {
		if a.end != nil {
			return readItem{err: a.end}
		}
		if a.cur != nil {
			clear(a.cur) // drop the strings it holds
			select {
			case a.free <- a.cur:
			default:
			}
		}
		b, ok := <-a.batches
		if !ok {
			a.end = io.ErrUnexpectedEOF // the reader stopped without an end: close was called
			return readItem{err: a.end}
		}
		a.cur, a.i = b, 0
	}
	it := a.cur[a.i]
	a.i++
	if final(it.err) {
		a.end = it.err
	}
	return it
}

// close stops the reading goroutines and waits for them to end.
func (a *readAhead) close() {
	close(a.stop)
	<-a.done
}

// isLineError tells a row's own problem, after which reading goes on, from
// the end of the input or a fatal error.
func isLineError(err error) bool {
	var le *LineError
	return errors.As(err, &le)
}
