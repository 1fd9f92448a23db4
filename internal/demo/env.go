package demo

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pglocal"
	"github.com/batonhq/baton/schema"
)

// Config is what both demos need.
type Config struct {
	// DatabaseURL names the server the demo creates a database of its
	// own on (never touching the database it names); empty runs a private
	// PostgreSQL in PGDir.
	DatabaseURL string
	// PGDir is the private PostgreSQL's data directory. Defaults to
	// pglocal.DefaultDir().
	PGDir string
	// Fresh deletes PGDir first.
	Fresh bool
	// Schema is baton's schema and migration sets, applied to the demo's
	// database.
	Schema schema.Config
	// Stdout receives the demo's account, Stderr the private server's
	// progress. Default to os.Stdout and os.Stderr.
	Stdout, Stderr io.Writer
	// Logger logs what goes wrong in cleaning up. Defaults to
	// slog.Default().
	Logger *slog.Logger
	// Executable is the worker binary the demo starts its workers with
	// ("worker run"). Defaults to this process's executable.
	Executable string
}

func (c Config) withDefaults() Config {
	c.PGDir = cmp.Or(c.PGDir, pglocal.DefaultDir())
	c.Schema.Schema = cmp.Or(c.Schema.Schema, schema.Default)
	if c.Stdout == nil {
		c.Stdout = os.Stdout
	}
	if c.Stderr == nil {
		c.Stderr = os.Stderr
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// env is what both demos start from: a database of their own (see
// openDatabase), migrated and open, a temporary directory for their data
// and the workers' logs, and the executable to start workers with.
type env struct {
	cfg  Config
	url  string
	db   *dbconn.DB
	dir  string
	exe  string
	logs []*os.File
	stop func()
}

// start prepares a demo's environment in a database named after name, its
// temporary directory named after dirPrefix. Close it when the demo ends,
// after its workers are stopped.
func start(ctx context.Context, c Config, name, dirPrefix string) (_ *env, err error) {
	url, cleanup, err := openDatabase(ctx, c, name)
	if err != nil {
		return nil, err
	}
	e := &env{cfg: c, url: url, stop: cleanup, exe: c.Executable}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if e.db, err = dbconn.Open(url, dbconn.Options{MaxOpenConns: 4}); err != nil {
		return nil, &UsageError{err}
	}
	if err := dbconn.Ping(ctx, e.db, url); err != nil {
		return nil, err
	}
	if _, err := schema.Migrate(ctx, e.db, c.Schema); err != nil {
		return nil, err
	}
	if e.dir, err = os.MkdirTemp("", dirPrefix); err != nil {
		return nil, fmt.Errorf("creating the demo's directory: %w", err)
	}
	if e.exe == "" {
		if e.exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("finding this executable to start workers with: %w", err)
		}
	}
	return e, nil
}

// logPath is where worker id's output goes.
func (e *env) logPath(id string) string { return filepath.Join(e.dir, id+".log") }

// startWorker starts `worker run --id id --log-format json args...` on
// the demo's database, its output to logPath(id).
func (e *env) startWorker(ctx context.Context, id string, args ...string) (*exec.Cmd, error) {
	c := exec.CommandContext(ctx, e.exe, append([]string{"run", "--id", id, "--log-format", "json"}, args...)...)
	c.Env = append(os.Environ(), "DATABASE_URL="+e.url, "BATON_SCHEMA="+e.cfg.Schema.Schema)
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
func (e *env) close() {
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

// interrupted says that a demo was cut short by SIGINT or SIGTERM (which
// cancel ctx) when that is why it failed.
func interrupted(ctx context.Context, demo string, err error) error {
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("%s interrupted: %w", demo, err)
	}
	return err
}
