package ingest

import (
	"errors"
	"io"
)

// readAhead reads the rows of a records file in a goroutine of its own,
// in batches, while the loader holds or stages the rows read before: the
// parsing and single-row checks, most of the loader's CPU while it reads,
// then run beside the rest instead of before it. Rows come out in file
// order with the results Next gave them.
type readAhead struct {
	batches chan []readItem
	free    chan []readItem // batches read, for reuse
	stop    chan struct{}
	done    chan struct{}
	cur     []readItem
	i       int
	end     error // io.EOF or the fatal error that ended the reading
}

// readItem is what RecordsReader.Next returned for one row, and the
// staging raw column of a valid row whose amount is not written
// canonically.
type readItem struct {
	row RecordRow
	err error
	raw string
}

const readAheadBatch = 1024

func newReadAhead(r *RecordsReader) *readAhead {
	a := &readAhead{batches: make(chan []readItem, 4), free: make(chan []readItem, 8),
		stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(a.done)
		defer close(a.batches)
		batch := make([]readItem, 0, readAheadBatch)
		for {
			row, err := r.Next()
			it := readItem{row: row, err: err}
			if err == nil {
				if f := r.Fields(); !canonicalInt(f[2]) {
					it.raw = rawRow(f)
				}
			}
			batch = append(batch, it)
			lineErr := err != nil && isLineError(err)
			if len(batch) == readAheadBatch || (err != nil && !lineErr) {
				select {
				case a.batches <- batch:
				case <-a.stop:
					return
				}
				if err != nil && !lineErr {
					return // io.EOF or fatal: Next would return it again
				}
				select {
				case batch = <-a.free:
					batch = batch[:0]
				default:
					batch = make([]readItem, 0, readAheadBatch)
				}
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
	if it.err != nil && !isLineError(it.err) {
		a.end = it.err
	}
	return it
}

// close stops the reading goroutine and waits for it to end.
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
