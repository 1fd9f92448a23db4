package pglocal

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Without server binaries, the error says how to install them.
func TestMissingBinariesSayHowToInstall(t *testing.T) {
	t.Setenv("PG_BINDIR", t.TempDir())
	_, err := Start(context.Background(), Options{Dir: t.TempDir()})
	if !errors.Is(err, ErrNoBinaries) {
		t.Fatalf("Start without binaries = %v, want ErrNoBinaries", err)
	}
	for _, want := range []string{"apt-get install", "DATABASE_URL", "PG_BINDIR"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q:\n%v", want, err)
		}
	}
}

// A second server on a data directory in use fails saying so, not with the
// server's start-up failure.
func TestDirectoryInUseIsReported(t *testing.T) {
	if _, err := BinDir(); err != nil {
		t.Skipf("needs the PostgreSQL server binaries: %v", err)
	}
	base, err := os.MkdirTemp("", "baton-pglocal-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "data")
	first, err := Start(context.Background(), Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { first.Stop(Immediate) })
	_, err = Start(context.Background(), Options{Dir: dir})
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("second Start on %s = %v, want ErrInUse naming the directory", dir, err)
	}
	if pid := InUse(dir); pid == 0 {
		t.Fatal("InUse = 0 while a server runs")
	}
	first.Stop(Fast)
	if pid := InUse(dir); pid != 0 {
		t.Fatalf("InUse = %d after the server stopped", pid)
	}
}
