package ingest

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
)

// keyLog keeps the filter key (recordKey) of every record the direct copy
// streams, 8 bytes each, in a temporary file: the file's repeats, which
// the filter only suspects, are then confirmed by one sequential read of
// it instead of one read of record_chunks per candidate, and only those
// confirmed are looked up in SQL. Two different records of a contract
// share a key with a chance of about n²/2⁶⁵ for n records, and the SQL
// check after it is exact. The file takes disk, not memory: 80 MB for
// 10M records, removed when the load ends.
type keyLog struct {
	*tempFile
	err error // sticky: the log is not to be trusted
}

func newKeyLog() (*keyLog, error) {
	f, err := newTempFile("baton-load-*.keys")
	if err != nil {
		return nil, err
	}
	return &keyLog{tempFile: f}, nil
}

// tempFile is a temporary file written through a buffer, then read back.
type tempFile struct {
	f   *os.File
	w   *bufio.Writer
	buf []byte
}

func newTempFile(pattern string) (*tempFile, error) {
	f, err := os.CreateTemp("", pattern)
	if err != nil {
		return nil, err
	}
	// Gone from the directory at once where the system allows (the open
	// file stays usable), so that nothing is left behind by a crash.
	_ = os.Remove(f.Name())
	return &tempFile{f: f, w: bufio.NewWriterSize(f, 1<<16)}, nil
}

// rewind flushes what was written and goes back to the start to read it.
func (t *tempFile) rewind() error {
	if err := t.w.Flush(); err != nil {
		return fmt.Errorf("writing a temporary file: %w", err)
	}
	if _, err := t.f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("reading a temporary file back: %w", err)
	}
	return nil
}

// close removes the file.
func (t *tempFile) close() {
	name := t.f.Name()
	t.f.Close()
	os.Remove(name)
}

// add appends keys. It runs in the goroutine that fills the filter.
func (k *keyLog) add(keys []uint64) {
	if k.err != nil {
		return
	}
	k.buf = k.buf[:0]
	for _, key := range keys {
		k.buf = binary.LittleEndian.AppendUint64(k.buf, key)
	}
	_, k.err = k.w.Write(k.buf)
}

// count adds to counts[key] the number of times each key of counts was
// logged. It is called once every key has been added.
func (k *keyLog) count(counts map[uint64]int) error {
	if k.err != nil {
		return fmt.Errorf("writing the record keys to a temporary file: %w", k.err)
	}
	if err := k.rewind(); err != nil {
		return err
	}
	r := bufio.NewReaderSize(k.f, 1<<16)
	var b [8 << 10]byte
	for {
		n, err := io.ReadFull(r, b[:])
		for i := 0; i+8 <= n; i += 8 {
			key := binary.LittleEndian.Uint64(b[i:])
			if c, ok := counts[key]; ok {
				counts[key] = c + 1
			}
		}
		switch {
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			return nil
		case err != nil:
			return fmt.Errorf("reading the record keys back: %w", err)
		}
	}
}
