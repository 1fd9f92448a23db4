package clienv

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/dberr"
	"github.com/batonhq/baton/internal/noun"
	"github.com/batonhq/baton/pricing/pricingschema"
	"github.com/batonhq/baton/schema"
)

// ErrNoDatabase is Open's error when neither --database-url nor
// $DATABASE_URL names a database.
var ErrNoDatabase = errors.New("no database: set DATABASE_URL or pass --database-url")

// Open connects to the database and, with checkSchema (every command but
// migrate), refuses a schema that does not match this binary. No or a
// malformed URL is a usage error; so is a schema mismatch (ExitCode).
func (e *Env) Open(ctx context.Context, opts dbconn.Options, checkSchema bool) (*dbconn.DB, error) {
	if e.DatabaseURL == "" {
		return nil, &ExitError{ExitUsage, ErrNoDatabase}
	}
	db, err := dbconn.Open(e.DatabaseURL, opts)
	if err != nil {
		return nil, &ExitError{ExitUsage, err}
	}
	e.opened = append(e.opened, db)
	if err := dbconn.Ping(ctx, db, e.DatabaseURL); err != nil {
		db.Close()
		return nil, err
	}
	if checkSchema {
		if err := schema.Check(ctx, db, e.SchemaConfig()); err != nil {
			db.Close()
			return nil, fmt.Errorf("checking schema of %s: %w", dbconn.Redact(e.DatabaseURL), err)
		}
	}
	return db, nil
}

// OpenWaiting is Open with a wait (dbconn.Wait): while the database does
// not answer it retries with back-off for up to wait, saying so once.
// Errors no retry can fix (bad URL, authentication, an unknown database, a
// schema mismatch or a schema that does not exist) fail at once.
func (e *Env) OpenWaiting(ctx context.Context, opts dbconn.Options, wait time.Duration) (*dbconn.DB, error) {
	return dbconn.Wait(ctx, dbconn.WaitConfig{Timeout: wait, Retryable: retryable, Message: dberr.Message, Logger: e.Logger},
		func(ctx context.Context) (*dbconn.DB, error) { return e.Open(ctx, opts, true) })
}

// retryable reports whether waiting may cure err (dberr.WorthWaiting).
// Open marks what the flags got wrong (no or a malformed URL) as usage
// errors, which no wait cures.
func retryable(err error) bool {
	var ee *ExitError
	return !errors.As(err, &ee) && dberr.WorthWaiting(err)
}

// NotReplicated is the error of a command that succeeded but some of
// whose commits PostgreSQL reported as not confirmed by the synchronous
// standby (dbconn.ErrNotReplicated): its changes are on the primary and
// may not survive a failover. Nil when there were none, or when the
// command reports them itself (OwnsDurability).
func (e *Env) NotReplicated() error {
	if e.OwnsDurability {
		return nil
	}
	var n int64
	for _, db := range e.opened {
		n += db.NotReplicatedCommits()
	}
	if n == 0 {
		return nil
	}
	return fmt.Errorf("%s of this command: %w; check its changes once the cluster is stable (worker status), and run it again if they are missing",
		noun.Count(n, "commit", "commits"), dbconn.ErrNotReplicated)
}

// SchemaConfig is the schema and migration sets the worker command uses:
// the distributor's core set and the pricing set.
func (e *Env) SchemaConfig() schema.Config {
	return schema.Config{Schema: e.Schema, Sets: []*schema.Set{schema.Core, pricingschema.Set}}
}

// Ready is a worker's readiness check on db (its /readyz): the database
// answers, and its schema matches this binary.
func (e *Env) Ready(db *dbconn.DB) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := db.PingContext(ctx); err != nil {
			return fmt.Errorf("database unreachable: %w", dbconn.RedactError(e.DatabaseURL, err))
		}
		return schema.Check(ctx, db, e.SchemaConfig())
	}
}
