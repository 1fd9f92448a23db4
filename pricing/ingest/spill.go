package ingest

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
)

// chunkSpill holds the records of open chunks that did not fit in the
// memory budget, until the file has been read: blocks of one contract's
// consecutive records (already checked, in file order), in temporary files
// chosen by the contract's hash, so that each file holds the records of a
// share of the contracts and can be read back alone into whole chunks.
// The files are removed from their folder as soon as they are made.
//
// A block is the contract's index, the record count and the ids' length
// (uint32 each), the ids as binary array elements, then the amounts
// (int64 each), all little-endian but the ids.
type chunkSpill struct {
	files   []*os.File
	writers []*bufio.Writer
	bytes   int64 // written in all
	reader  *bufio.Reader
	part    int // the file being read back, -1 before the first
	scratch []byte
	// The block being read back.
	count, idsLen int
}

// Spill file sizing: the write buffers take a sixteenth of the budget
// (at least 4 of 2 KiB), each from 2 KiB to 32 KiB, in up to 256 files:
// the more files, the fewer contracts each holds, and the less memory
// reading one back into whole chunks takes.
const (
	spillShare      = 16
	spillMinBuf     = 2 << 10
	spillMaxBuf     = 32 << 10
	spillMinFiles   = 4
	spillMaxFiles   = 256
	spillReadBuffer = 64 << 10
)

// newChunkSpill makes the spill files for a budget, or returns an error
// if a temporary file cannot be made.
func newChunkSpill(budget int64, noFile bool) (*chunkSpill, error) {
	mem := budget / spillShare
	size := min(spillMaxBuf, max(spillMinBuf, mem/spillMaxFiles))
	n := int(min(spillMaxFiles, max(spillMinFiles, mem/size)))
	s := &chunkSpill{part: -1}
	for range n {
		f, err := unlinkedTemp("baton-load-*.chunks", noFile)
		if err != nil {
			s.close()
			return nil, err
		}
		s.files = append(s.files, f)
		s.writers = append(s.writers, bufio.NewWriterSize(f, int(size)))
	}
	return s, nil
}

// write appends a block of count records of contract ci to the file of
// hash.
func (s *chunkSpill) write(hash uint64, ci int32, count int, ids []byte, amounts []int64) error {
	w := s.writers[hash%uint64(len(s.writers))]
	b := s.scratch[:0]
	b = binary.LittleEndian.AppendUint32(b, uint32(ci))
	b = binary.LittleEndian.AppendUint32(b, uint32(count))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(ids)))
	s.scratch = b
	if _, err := w.Write(b); err != nil {
		return err
	}
	if _, err := w.Write(ids); err != nil {
		return err
	}
	b = b[:0]
	for _, a := range amounts {
		b = binary.LittleEndian.AppendUint64(b, uint64(a))
	}
	s.scratch = b
	_, err := w.Write(b)
	s.bytes += int64(12 + len(ids) + 8*len(amounts))
	return err
}

// writeRow appends a block of one record of contract ci to the file of
// hash.
func (s *chunkSpill) writeRow(hash uint64, ci int32, id string, amount int64) error {
	w := s.writers[hash%uint64(len(s.writers))]
	n := 12 + 4 + len(id) + 8
	if w.Available() < n {
		if err := w.Flush(); err != nil {
			return err
		}
	}
	b := w.AvailableBuffer()
	b = binary.LittleEndian.AppendUint32(b, uint32(ci))
	b = binary.LittleEndian.AppendUint32(b, 1)
	b = binary.LittleEndian.AppendUint32(b, uint32(4+len(id)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(id)))
	b = append(b, id...)
	b = binary.LittleEndian.AppendUint64(b, uint64(amount))
	s.bytes += int64(n)
	_, err := w.Write(b)
	return err
}

// nextPart starts reading back the next file; false when all have been.
func (s *chunkSpill) nextPart() (bool, error) {
	if s.part < 0 {
		for _, w := range s.writers {
			if err := w.Flush(); err != nil {
				return false, err
			}
		}
		s.writers = nil
	} else {
		// The file read is no longer needed: free its disk at once.
		s.files[s.part].Close()
		s.files[s.part] = nil
	}
	s.part++
	if s.part >= len(s.files) {
		return false, nil
	}
	f := s.files[s.part]
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return false, err
	}
	if s.reader == nil {
		s.reader = bufio.NewReaderSize(f, spillReadBuffer)
	} else {
		s.reader.Reset(f)
	}
	return true, nil
}

// readBlock reads the header of the next block of the file being read
// back and returns its contract (of cs); io.EOF at the file's end. append
// then adds the block's records to the contract's open chunk.
func (s *chunkSpill) readBlock(cs []*streamContract) (*streamContract, error) {
	var h [12]byte
	if _, err := io.ReadFull(s.reader, h[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			err = errors.New("spill file cut short")
		}
		return nil, err
	}
	ci := int(binary.LittleEndian.Uint32(h[0:]))
	s.count = int(binary.LittleEndian.Uint32(h[4:]))
	s.idsLen = int(binary.LittleEndian.Uint32(h[8:]))
	if ci >= len(cs) {
		return nil, fmt.Errorf("bad contract index %d", ci)
	}
	return cs[ci], nil
}

// append reads the records of the block whose header readBlock read into
// c's open chunk.
func (s *chunkSpill) append(c *streamContract) error {
	n := len(c.ids)
	c.ids = slices.Grow(c.ids, s.idsLen)[:n+s.idsLen]
	if _, err := io.ReadFull(s.reader, c.ids[n:]); err != nil {
		return fmt.Errorf("spill file cut short: %w", err)
	}
	c.amounts = slices.Grow(c.amounts, s.count)
	var a [8]byte
	for range s.count {
		if _, err := io.ReadFull(s.reader, a[:]); err != nil {
			return fmt.Errorf("spill file cut short: %w", err)
		}
		c.amounts = append(c.amounts, int64(binary.LittleEndian.Uint64(a[:])))
	}
	c.count += s.count
	return nil
}

// close closes (and so deletes) the files.
func (s *chunkSpill) close() {
	for _, f := range s.files {
		if f != nil {
			f.Close()
		}
	}
	s.files = nil
}
