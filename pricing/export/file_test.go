package export_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/batonhq/baton/pricing/export"
)

// A failed write leaves the file that was there untouched and no
// temporary file beside it; a successful one replaces it, with the mode
// 0666 less the umask.
func TestToFileIsAtomic(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "priced.csv")
	if err := os.WriteFile(path, []byte("old\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	boom := errors.New("connection lost")
	_, err := export.ToFile(path, func(w io.Writer) (int64, error) {
		fmt.Fprint(w, "half a line")
		return 0, boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("ToFile with a failing write: error %v, want one wrapping %v", err, boom)
	}
	assertDir(t, dir, path, "old\n")

	incomplete := fmt.Errorf("some records unpriced: %w", export.ErrIncomplete)
	if _, err := export.ToFile(path, func(io.Writer) (int64, error) { return 0, incomplete }); err != incomplete {
		t.Fatalf("ToFile with an incomplete export: error %v, want it returned as it is", err)
	}
	assertDir(t, dir, path, "old\n")

	n, err := export.ToFile(path, func(w io.Writer) (int64, error) {
		_, err := fmt.Fprint(w, "a,b\n1,2\n")
		return 1, err
	})
	if err != nil || n != 1 {
		t.Fatalf("ToFile: %d, %v; want 1, nil", n, err)
	}
	assertDir(t, dir, path, "a,b\n1,2\n")
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	umask := syscall.Umask(0)
	syscall.Umask(umask)
	if want := os.FileMode(0o666 &^ umask); st.Mode().Perm() != want {
		t.Errorf("mode %v, want %v (0666 less the umask)", st.Mode().Perm(), want)
	}
}

// A directory that cannot be written to is an error naming the file.
func TestToFileUnwritableDirectory(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "missing", "priced.csv")
	_, err := export.ToFile(path, func(io.Writer) (int64, error) { t.Fatal("write called"); return 0, nil })
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("error %v, want one wrapping os.ErrNotExist", err)
	}
	if want := "exporting to " + path; len(err.Error()) < len(want) || err.Error()[:len(want)] != want {
		t.Errorf("error %q does not start with %q", err, want)
	}
}

// assertDir checks that dir holds only path, with content want.
func assertDir(t *testing.T, dir, path, want string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != filepath.Base(path) {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v, want only %s", names, filepath.Base(path))
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("%s holds %q, want %q", path, got, want)
	}
}

// ToPath writes "-" and "" to standard output and any other path as
// ToFile does.
func TestToPath(t *testing.T) {
	t.Parallel()
	write := func(w io.Writer) (int64, error) { _, err := io.WriteString(w, "a,b\n"); return 1, err }
	for _, path := range []string{"-", ""} {
		var stdout strings.Builder
		if n, err := export.ToPath(path, &stdout, write); err != nil || n != 1 || stdout.String() != "a,b\n" {
			t.Errorf("ToPath(%q): %d, %v, stdout %q", path, n, err, stdout.String())
		}
	}
	file := filepath.Join(t.TempDir(), "out.csv")
	var stdout strings.Builder
	if _, err := export.ToPath(file, &stdout, write); err != nil || stdout.Len() != 0 {
		t.Fatalf("ToPath(file): %v, stdout %q", err, stdout.String())
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "a,b\n" {
		t.Errorf("file: %q, %v", b, err)
	}
}
