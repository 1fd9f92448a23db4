package pglocal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Without server binaries, the error says how to install them.
func TestMissingBinariesSayHowToInstall(t *testing.T) {
	t.Setenv(EnvVersion, "")
	t.Setenv(EnvBinDir, "")
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

// BATON_PG_VERSION names a major that is not installed: the error says
// how to install it, rather than falling back to another major.
func TestVersionNotInstalledSaysHowToInstall(t *testing.T) {
	t.Setenv(EnvBinDir, "")
	t.Setenv("PG_BINDIR", "")
	t.Setenv(EnvHome, t.TempDir())
	t.Setenv(EnvVersion, "99")
	_, err := BinDir()
	if !errors.Is(err, ErrNoBinaries) || !strings.Contains(err.Error(), "scripts/install-pg.sh 99") {
		t.Fatalf("BinDir with %s=99 = %v, want ErrNoBinaries naming scripts/install-pg.sh 99", EnvVersion, err)
	}
	t.Setenv(EnvVersion, "seventeen")
	if _, err := BinDir(); err == nil || !strings.Contains(err.Error(), "major version") {
		t.Fatalf("BinDir with %s=seventeen = %v, want an error asking for a major version", EnvVersion, err)
	}
}

// BATON_PG_BINDIR holding another major than BATON_PG_VERSION is an
// error, not a silent run on the wrong version.
func TestVersionAndBinDirMustAgree(t *testing.T) {
	t.Setenv(EnvVersion, "")
	dir, err := BinDir()
	if err != nil {
		t.Skipf("needs the PostgreSQL server binaries: %v", err)
	}
	major, err := BinMajor(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvBinDir, dir)
	t.Setenv(EnvVersion, fmt.Sprint(major+1))
	if _, err := BinDir(); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("holds PostgreSQL %d", major)) {
		t.Fatalf("BinDir with %s=%d over %s = %v, want a mismatch error", EnvVersion, major+1, dir, err)
	}
	t.Setenv(EnvVersion, fmt.Sprint(major))
	if got, err := BinDir(); err != nil || got != dir {
		t.Fatalf("BinDir with %s=%d over %s = %q, %v", EnvVersion, major, dir, got, err)
	}
}

// The major version is read from postgres --version as each build prints
// it.
func TestParseMajor(t *testing.T) {
	for out, want := range map[string]int{
		"postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)\n": 15,
		"postgres (PostgreSQL) 17.10\n":                          17,
		"postgres (PostgreSQL) 18beta1\n":                        18,
		"postgres (PostgreSQL) 9.6.24\n":                         9,
		"postgres\n":                                             0,
		"postgres (PostgreSQL) devel\n":                          0,
	} {
		if got := parseMajor(out); got != want {
			t.Errorf("parseMajor(%q) = %d, want %d", out, got, want)
		}
	}
}
