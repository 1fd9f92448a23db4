package seed

import (
	"fmt"
	"os"
	"path/filepath"
)

// WriteFiles writes tiers.csv and records.csv for o in dir (created if
// missing), replacing files of those names, and returns their paths.
// progress, if not nil, is called as WriteRecords calls it.
func WriteFiles(dir string, o Options, progress func(rows int64)) (tiersPath, recordsPath string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("creating %s: %w", dir, err)
	}
	tiersPath, recordsPath = filepath.Join(dir, "tiers.csv"), filepath.Join(dir, "records.csv")
	if progress == nil {
		progress = func(int64) {}
	}
	if err := writeFile(tiersPath, func(f *os.File) error { return WriteTiers(f, o) }); err != nil {
		return "", "", err
	}
	if err := writeFile(recordsPath, func(f *os.File) error { return WriteRecords(f, o, progress) }); err != nil {
		return "", "", err
	}
	return tiersPath, recordsPath, nil
}

// writeFile creates path and writes it with fn.
func writeFile(path string, fn func(*os.File) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := fn(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}
