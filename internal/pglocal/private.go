package pglocal

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
)

// DefaultDir is where the demo keeps its private cluster between runs: in
// the user's cache directory, or, for root (the server runs as the
// postgres user, which cannot enter root's home) and users without one, in
// the temporary directory under a name carrying the user id.
func DefaultDir() string {
	if os.Geteuid() != 0 {
		if dir, err := os.UserCacheDir(); err == nil {
			return filepath.Join(dir, "baton", "pgdata")
		}
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("baton-pgdata-%d", os.Geteuid()))
}

// StartWithDatabase starts (or reuses) the private cluster in opts.Dir,
// removing the directory first when fresh, and creates a new, empty
// database name in it (dropping one of that name). It returns the
// database's URL and a function that stops the server. A directory a
// running server uses is refused (ErrInUse), fresh or not.
func StartWithDatabase(ctx context.Context, opts Options, name string, fresh bool) (string, func(), error) {
	if fresh {
		if err := checkNotInUse(opts.Dir); err != nil {
			return "", nil, err
		}
		if err := os.RemoveAll(opts.Dir); err != nil {
			return "", nil, fmt.Errorf("removing %s: %w", opts.Dir, err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(opts.Dir), 0o755); err != nil {
		return "", nil, fmt.Errorf("creating the parent of %s: %w", opts.Dir, err)
	}
	srv, err := Start(ctx, opts)
	if err != nil {
		return "", nil, err
	}
	stop := func() { srv.Stop(Fast) }
	admin, err := sql.Open("pgx", srv.URL("postgres"))
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("connecting to the private server in %s: %w", opts.Dir, err)
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
