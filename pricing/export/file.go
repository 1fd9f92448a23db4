package export

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
)

// ToFile writes what write writes to the file path, atomically: to a
// temporary file beside it first, synced, then renamed into place and the
// directory synced, so a failed or interrupted export never leaves a
// truncated file under that name (an existing file stays as it was), and
// a crash cannot leave an empty or missing file behind a reported success.
// The file gets the usual permissions, 0666 less the umask. write is
// given a buffered writer; Write and WriteComplete fit it:
//
//	n, err := export.ToFile("priced.csv", func(w io.Writer) (int64, error) {
//		return export.NewStore(db, "").Write(ctx, w)
//	})
//
// An error wrapping ErrIncomplete is returned as it is.
func ToFile(path string, write func(io.Writer) (int64, error)) (int64, error) {
	dir := filepath.Dir(path)
	tmp, err := createTemp(dir, ".export-")
	if err != nil {
		return 0, fmt.Errorf("exporting to %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	w := bufio.NewWriterSize(tmp, 1<<16)
	n, err := write(w)
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, ErrIncomplete) {
		return 0, err
	}
	if err != nil {
		return 0, fmt.Errorf("exporting to %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return 0, fmt.Errorf("exporting to %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		err = d.Sync()
		d.Close()
		if err != nil {
			return n, fmt.Errorf("exporting to %s: syncing its directory: %w", path, err)
		}
	}
	return n, nil
}

// createTemp creates a new file in dir like os.CreateTemp, but with mode
// 0666 less the umask, the mode the final file should have.
func createTemp(dir, prefix string) (*os.File, error) {
	for range 100 {
		name := filepath.Join(dir, prefix+strconv.FormatUint(rand.Uint64(), 36))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
		if os.IsExist(err) {
			continue
		}
		return f, err
	}
	return nil, fmt.Errorf("no free temporary name in %s", dir)
}
