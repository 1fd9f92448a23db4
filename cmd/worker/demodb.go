package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/schema"
)

// demoPlace says where a demo runs: name is the database it creates
// (baton_demo, baton_schedule_demo), in the private cluster in pgDir when
// DATABASE_URL is unset, with a unique suffix on DATABASE_URL's server
// otherwise.
type demoPlace struct {
	name  string
	pgDir string
	fresh bool
}

// openDemoDatabase gives a demo a database of its own and points g at it.
// A demo never touches the database DATABASE_URL names: with it set, the
// demo gets a new database on the same server (the role needs CREATEDB);
// without it, a private PostgreSQL started from the local binaries. The
// returned cleanup drops that database (or stops the private server); call
// it when the demo ends, however it ends: an interrupt (SIGINT, SIGTERM)
// cancels ctx, so the demo returns and its deferred cleanup runs. Cleanup
// does not use ctx and may be called more than once.
func openDemoDatabase(ctx context.Context, g *globals, p demoPlace) (cleanup func(), err error) {
	out := g.stdout
	if g.databaseURL == "" {
		fmt.Fprintf(out, "DATABASE_URL is not set: starting a private PostgreSQL in %s\n", p.pgDir)
		u, stop, err := privateDatabase(ctx, g, p.pgDir, p.name, p.fresh)
		if err != nil {
			return nil, err
		}
		g.databaseURL = u
		return onlyOnce(stop), nil
	}
	base := g.databaseURL
	name, u, drop, err := scratchDatabase(ctx, base, p.name)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "using a database of its own on the server of %s: %s (dropped at the end)\n",
		dbconn.Redact(base), dbconn.Redact(u))
	g.databaseURL = u
	return onlyOnce(func() {
		if drop() {
			fmt.Fprintf(out, "dropped the demo's database %s\n", name)
		}
	}), nil
}

// interrupted says that a demo was cut short by SIGINT or SIGTERM (which
// cancel ctx) when that is why it failed.
func interrupted(ctx context.Context, demo string, err error) error {
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("%s interrupted: %w", demo, err)
	}
	return err
}

func onlyOnce(f func()) func() {
	var once sync.Once
	return func() { once.Do(f) }
}

// scratchDatabase creates a database named prefix_PID_N on the server of
// base and returns its name, its URL and a function that drops it,
// reporting whether it did.
func scratchDatabase(ctx context.Context, base, prefix string) (name, dsn string, drop func() bool, err error) {
	admin, err := dbconn.Open(base, dbconn.Options{MaxOpenConns: 1, ApplicationName: "baton-demo"})
	if err != nil {
		return "", "", nil, &exitError{exitUsage, err}
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
			slog.Warn("dropping the demo's database failed; drop it by hand", "database", name,
				"error", dbconn.RedactError(base, err).Error())
			return false
		}
		return true
	}
	return name, withDatabase(base, name), drop, nil
}

// withDatabase returns dsn (URL or key=value form) naming database name.
func withDatabase(dsn, name string) string {
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

// demoEnv is what both demos start from: a database of their own (see
// openDemoDatabase), migrated and open, a temporary directory for their
// data and the workers' logs, and this executable to start workers with.
type demoEnv struct {
	g    *globals
	db   *dbconn.DB
	dir  string
	exe  string
	logs []*os.File
	stop func()
}

// startDemo prepares a demo's environment in place p, its temporary
// directory named after dirPrefix. Close it when the demo ends, after
// its workers are stopped.
func startDemo(ctx context.Context, g *globals, p demoPlace, dirPrefix string) (_ *demoEnv, err error) {
	cleanup, err := openDemoDatabase(ctx, g, p)
	if err != nil {
		return nil, err
	}
	e := &demoEnv{g: g, stop: cleanup}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if e.db, err = g.open(ctx, dbconn.Options{MaxOpenConns: 4}, false); err != nil {
		return nil, err
	}
	if _, err := schema.Migrate(ctx, e.db, g.schemaConfig()); err != nil {
		return nil, err
	}
	if e.dir, err = os.MkdirTemp("", dirPrefix); err != nil {
		return nil, fmt.Errorf("creating the demo's directory: %w", err)
	}
	if e.exe, err = os.Executable(); err != nil {
		return nil, fmt.Errorf("finding this executable to start workers with: %w", err)
	}
	return e, nil
}

// logPath is where worker id's output goes.
func (e *demoEnv) logPath(id string) string { return filepath.Join(e.dir, id+".log") }

// startWorker starts `worker run --id id --log-format json args...` on
// the demo's database, its output to logPath(id).
func (e *demoEnv) startWorker(ctx context.Context, id string, args ...string) (*exec.Cmd, error) {
	c := exec.CommandContext(ctx, e.exe, append([]string{"run", "--id", id, "--log-format", "json"}, args...)...)
	c.Env = append(os.Environ(), "DATABASE_URL="+e.g.databaseURL, "BATON_SCHEMA="+e.g.schema)
	lf, err := os.Create(e.logPath(id))
	if err != nil {
		return nil, fmt.Errorf("starting worker %s: %w", id, err)
	}
	e.logs = append(e.logs, lf)
	c.Stdout, c.Stderr = lf, lf
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("starting worker %s: %w", id, err)
	}
	return c, nil
}

// close removes the demo's directory and its database (or stops the
// private server).
func (e *demoEnv) close() {
	for _, f := range e.logs {
		f.Close()
	}
	if e.dir != "" {
		os.RemoveAll(e.dir)
	}
	if e.db != nil {
		e.db.Close()
	}
	e.stop()
}
