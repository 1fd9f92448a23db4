package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batonhq/baton/internal/clienv"
	"github.com/batonhq/baton/internal/pglocal"
)

// A demo whose private data directory another server uses says so and
// names --pg-dir, the way out; and the default directory is the user's
// own.
func TestDemoDataDirectoryInUseNamesPGDir(t *testing.T) {
	t.Parallel()
	base, err := os.MkdirTemp("", "baton-pgdir-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "data")
	srv, err := pglocal.Start(context.Background(), pglocal.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop(pglocal.Immediate) })
	c := cli{t: t} // no DATABASE_URL: the demo starts its own server
	out, errs, code := c.run("demo", "--pg-dir", dir, "--contracts", "1", "--records-per-contract", "1")
	if code != clienv.ExitUsage || !strings.Contains(errs, "is used by a running PostgreSQL server") || !strings.Contains(errs, "--pg-dir") {
		t.Fatalf("demo on a directory in use: exit %d, want %d naming --pg-dir\nstdout: %s\nstderr: %s", code, clienv.ExitUsage, out, errs)
	}
	if d := pglocal.DefaultDir(); os.Geteuid() == 0 && !strings.HasSuffix(d, "baton-pgdata-0") {
		t.Errorf("root's default data directory %s does not carry its user id", d)
	}
}
