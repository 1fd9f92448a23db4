package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pglocal"
)

// UsageError is an error the user must fix in how the demo was asked to
// run (a data directory in use, a role that cannot create a database, a
// malformed URL), not a failure of the demo.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usageError(format string, args ...any) error {
	return &UsageError{fmt.Errorf(format, args...)}
}

// openDatabase gives a demo a database named after name and returns its
// URL and a cleanup that drops it (or stops the private server). With
// c.DatabaseURL set the database is new on that server (the role needs
// CREATEDB); without it, a private PostgreSQL runs in c.PGDir. Cleanup
// does not use ctx (an interrupt cancels it) and may be called more than
// once.
func openDatabase(ctx context.Context, c Config, name string) (dsn string, cleanup func(), err error) {
	out := c.Stdout
	if c.DatabaseURL == "" {
		fmt.Fprintf(out, "DATABASE_URL is not set: starting a private PostgreSQL in %s\n", c.PGDir)
		if c.Fresh {
			if pid := pglocal.InUse(c.PGDir); pid != 0 {
				return "", nil, usageError("--fresh: %s is used by a running PostgreSQL server (pid %d), perhaps another demo; wait for it to finish or choose another --pg-dir", c.PGDir, pid)
			}
		}
		u, stop, err := pglocal.StartWithDatabase(ctx, pglocal.Options{Dir: c.PGDir, Log: func(f string, a ...any) {
			fmt.Fprintf(c.Stderr, "  "+f+"\n", a...)
		}}, name, c.Fresh)
		if errors.Is(err, pglocal.ErrInUse) {
			return "", nil, usageError("%v; or give --pg-dir another directory", err)
		}
		if err != nil {
			return "", nil, err
		}
		return u, onlyOnce(stop), nil
	}
	base := c.DatabaseURL
	name, u, drop, err := scratchDatabase(ctx, c.Logger, base, name)
	if err != nil {
		return "", nil, err
	}
	fmt.Fprintf(out, "using a database of its own on the server of %s: %s (dropped at the end)\n",
		dbconn.Redact(base), dbconn.Redact(u))
	return u, onlyOnce(func() {
		if drop() {
			fmt.Fprintf(out, "dropped the demo's database %s\n", name)
		}
	}), nil
}

func onlyOnce(f func()) func() {
	var once sync.Once
	return func() { once.Do(f) }
}

// scratchDatabase creates a database named prefix_PID_N on the server of
// base and returns its name, its URL and a function that drops it,
// reporting whether it did.
func scratchDatabase(ctx context.Context, log *slog.Logger, base, prefix string) (name, dsn string, drop func() bool, err error) {
	admin, err := dbconn.Open(base, dbconn.Options{MaxOpenConns: 1, ApplicationName: "baton-demo"})
	if err != nil {
		return "", "", nil, &UsageError{err}
	}
	name = fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), time.Now().UnixNano()%1e6)
	if _, err := admin.ExecContext(ctx, fmt.Sprintf(`CREATE DATABASE %q TEMPLATE template0`, name)); err != nil {
		if ctx.Err() != nil {
			// Interrupted: the server may have created it all the same.
			c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			_, _ = admin.ExecContext(c, fmt.Sprintf(`DROP DATABASE IF EXISTS %q WITH (FORCE)`, name))
			cancel()
		}
		admin.Close()
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42501" {
			return "", "", nil, usageError("the demo runs in a database of its own and cannot create one (%s): grant the role CREATEDB, or unset DATABASE_URL to run a private PostgreSQL", pe.Message)
		}
		return "", "", nil, fmt.Errorf("creating the demo's database on %s: %w", dbconn.Redact(base), dbconn.RedactError(base, err))
	}
	drop = func() bool {
		defer admin.Close()
		// An interrupt has cancelled the demo's context; the drop still runs.
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(c, fmt.Sprintf(`DROP DATABASE IF EXISTS %q WITH (FORCE)`, name)); err != nil {
			log.Warn("dropping the demo's database failed; drop it by hand", "database", name,
				"error", dbconn.RedactError(base, err).Error())
			return false
		}
		return true
	}
	return name, WithDatabase(base, name), drop, nil
}

// WithDatabase returns dsn (URL or key=value form) naming database name.
func WithDatabase(dsn, name string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		if u, err := url.Parse(dsn); err == nil {
			u.Path = "/" + name
			q := u.Query()
			if q.Has("dbname") {
				q.Set("dbname", name)
				u.RawQuery = q.Encode()
			}
			return u.String()
		}
	}
	return dsn + " dbname=" + name // the last setting of a key wins
}
