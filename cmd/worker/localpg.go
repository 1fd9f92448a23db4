package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/batonhq/baton/internal/pglocal"
)

// defaultPGDir is where the demo keeps its private cluster between runs.
func defaultPGDir() string {
	if os.Geteuid() != 0 {
		if dir, err := os.UserCacheDir(); err == nil {
			return filepath.Join(dir, "baton", "pgdata")
		}
	}
	// The server runs as the postgres user, which cannot enter root's home.
	// The user id keeps users without a cache directory apart.
	return filepath.Join(os.TempDir(), fmt.Sprintf("baton-pgdata-%d", os.Geteuid()))
}

// privateDatabase starts (or reuses) the private cluster in dir and
// returns the URL of a freshly created database named name.
func privateDatabase(ctx context.Context, g *globals, dir, name string, fresh bool) (string, func(), error) {
	if fresh {
		if pid := pglocal.InUse(dir); pid != 0 {
			return "", nil, usageError("--fresh: %s is used by a running PostgreSQL server (pid %d), perhaps another demo; wait for it to finish or choose another --pg-dir", dir, pid)
		}
		if err := os.RemoveAll(dir); err != nil {
			return "", nil, fmt.Errorf("removing %s: %w", dir, err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", nil, err
	}
	srv, err := pglocal.Start(ctx, pglocal.Options{Dir: dir, Log: func(f string, a ...any) {
		fmt.Fprintf(g.stderr, "  "+f+"\n", a...)
	}})
	if errors.Is(err, pglocal.ErrInUse) {
		return "", nil, usageError("%v; or give --pg-dir another directory", err)
	}
	if err != nil {
		return "", nil, err
	}
	stop := func() { srv.Stop(pglocal.Fast) }
	admin, err := sql.Open("pgx", srv.URL("postgres"))
	if err != nil {
		stop()
		return "", nil, err
	}
	defer admin.Close()
	for _, stmt := range []string{
		fmt.Sprintf(`DROP DATABASE IF EXISTS %q WITH (FORCE)`, name),
		fmt.Sprintf(`CREATE DATABASE %q`, name),
	} {
		if _, err := admin.ExecContext(ctx, stmt); err != nil {
			stop()
			return "", nil, fmt.Errorf("preparing database %s: %w", name, err)
		}
	}
	return srv.URL(name), stop, nil
}
