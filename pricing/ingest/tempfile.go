package ingest

import (
	"errors"
	"os"
)

// errNoTempFile is what a test's Options.noTempFile makes of every
// temporary file.
var errNoTempFile = errors.New("no temporary file (test)")

// unlinkedTemp creates a temporary file and removes it from its folder at
// once, where the system allows (the open file stays usable), so that
// nothing is left behind by a crash. fail (a test's noTempFile) makes it
// fail as a full or read-only disk would.
func unlinkedTemp(pattern string, fail bool) (*os.File, error) {
	if fail {
		return nil, errNoTempFile
	}
	f, err := os.CreateTemp("", pattern)
	if err != nil {
		return nil, err
	}
	_ = os.Remove(f.Name())
	return f, nil
}
