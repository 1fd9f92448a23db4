package cliflags

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// InputFile refuses a missing or unreadable input file given to flag
// (nothing when path is empty), so that it is refused before the database
// is contacted.
func InputFile(flag, path string) error {
	if path == "" {
		return nil
	}
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s %s: no such file", flag, path)
	case err != nil:
		return fmt.Errorf("%s %s: %w", flag, path, err)
	case st.IsDir():
		return fmt.Errorf("%s %s is a directory, want a CSV file", flag, path)
	}
	return nil
}
