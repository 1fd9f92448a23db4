package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/batonhq/baton/internal/noun"
	"github.com/batonhq/baton/internal/progress"
	"github.com/batonhq/baton/pricing/pricingschema"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/dberr"
	"github.com/batonhq/baton/internal/redact"
	"github.com/batonhq/baton/schema"
)

// globals are the flags every command shares.
type globals struct {
	databaseURL string
	schema      string
	logFormat   string
	logLevel    string
	logger      *slog.Logger
	redactor    *redact.Redactor // hides database passwords in all output
	stderr      io.Writer
	stdout      io.Writer
	// opened are the handles the command opened, whose commits PostgreSQL
	// may report as not confirmed by the synchronous standby (see
	// notReplicated).
	opened []*dbconn.DB
	// ownsDurability is set by commands that report such commits
	// themselves (a load names its load id; a worker logs each batch).
	ownsDurability bool
}

func (g *globals) register(root *cobra.Command) {
	f := root.PersistentFlags()
	f.StringVar(&g.databaseURL, "database-url", "", "PostgreSQL URL (default $DATABASE_URL)")
	f.StringVar(&g.schema, "schema", "", "PostgreSQL schema holding baton's tables (default $BATON_SCHEMA, else \"baton\")")
	f.StringVar(&g.logFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn or error")
}

func (g *globals) setup(cmd *cobra.Command) error {
	// Logs and progress lines share standard error: a log line ends a
	// progress line rather than being glued to it.
	g.stdout, g.stderr = cmd.OutOrStdout(), progress.NewLine(cmd.ErrOrStderr())
	if g.databaseURL == "" {
		g.databaseURL = os.Getenv("DATABASE_URL")
	}
	if g.redactor == nil {
		g.redactor = redact.New()
	}
	g.redactor.Add(g.databaseURL)
	if g.schema == "" {
		g.schema = cmp.Or(os.Getenv("BATON_SCHEMA"), schema.Default)
	}
	if err := schema.Validate(g.schema); err != nil {
		return usageError("--schema: %v", err)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
		return usageError("--log-level %q: want debug, info, warn or error", g.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(g.logFormat) {
	case "text":
		g.logger = slog.New(g.redactor.Handler(slog.NewTextHandler(g.stderr, opts)))
	case "json":
		g.logger = slog.New(g.redactor.Handler(slog.NewJSONHandler(g.stderr, opts)))
	default:
		return usageError("--log-format %q: want text or json", g.logFormat)
	}
	slog.SetDefault(g.logger)
	return nil
}

var errNoDatabase = errors.New("no database: set DATABASE_URL or pass --database-url")

// open connects to the database and, unless migrating, refuses a schema
// that does not match this binary.
func (g *globals) open(ctx context.Context, opts dbconn.Options, checkSchema bool) (*dbconn.DB, error) {
	if g.databaseURL == "" {
		return nil, &exitError{exitUsage, errNoDatabase}
	}
	db, err := dbconn.Open(g.databaseURL, opts)
	if err != nil {
		return nil, &exitError{exitUsage, err}
	}
	g.opened = append(g.opened, db)
	if err := dbconn.Ping(ctx, db, g.databaseURL); err != nil {
		db.Close()
		return nil, err
	}
	if checkSchema {
		if err := schema.Check(ctx, db, g.schemaConfig()); err != nil {
			db.Close()
			// A schema mismatch is a usage error (exitCode).
			return nil, fmt.Errorf("checking schema of %s: %w", dbconn.Redact(g.databaseURL), err)
		}
	}
	return db, nil
}

// openWaiting is open with a wait (dbconn.Wait): while the database does
// not answer it retries with back-off for up to wait, saying so once.
// Errors no retry can fix (bad URL, authentication, an unknown database, a
// schema mismatch or a schema that does not exist) fail at once.
func (g *globals) openWaiting(ctx context.Context, opts dbconn.Options, wait time.Duration) (*dbconn.DB, error) {
	return dbconn.Wait(ctx, dbconn.WaitConfig{Timeout: wait, Retryable: retryable, Message: dberr.Message, Logger: g.logger},
		func(ctx context.Context) (*dbconn.DB, error) { return g.open(ctx, opts, true) })
}

// retryable reports whether waiting may cure err (dberr.WorthWaiting).
// open marks what the flags got wrong (no or a malformed URL) as usage
// errors, which no wait cures.
func retryable(err error) bool {
	var ee *exitError
	return !errors.As(err, &ee) && dberr.WorthWaiting(err)
}

// notReplicated is the error of a command that succeeded but some of
// whose commits PostgreSQL reported as not confirmed by the synchronous
// standby (dbconn.ErrNotReplicated): its changes are on the primary and
// may not survive a failover. Nil when there were none, or when the
// command reports them itself.
func (g *globals) notReplicated() error {
	if g.ownsDurability {
		return nil
	}
	var n int64
	for _, db := range g.opened {
		n += db.NotReplicatedCommits()
	}
	if n == 0 {
		return nil
	}
	return fmt.Errorf("%s of this command: %w; check its changes once the cluster is stable (worker status), and run it again if they are missing",
		noun.Count(n, "commit", "commits"), dbconn.ErrNotReplicated)
}

// schemaConfig is the schema and migration sets the worker command uses:
// the distributor's core set and the pricing set.
func (g *globals) schemaConfig() schema.Config {
	return schema.Config{Schema: g.schema, Sets: []*schema.Set{schema.Core, pricingschema.Set}}
}

// ready is a worker's readiness check on db (its /readyz): the database
// answers, and its schema matches this binary.
func (g *globals) ready(db *dbconn.DB) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := db.PingContext(ctx); err != nil {
			return fmt.Errorf("database unreachable: %w", dbconn.RedactError(g.databaseURL, err))
		}
		return schema.Check(ctx, db, g.schemaConfig())
	}
}
