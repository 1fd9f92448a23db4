// Package schema owns baton's database schema: versioned SQL migrations
// embedded in the binary and applied with bun's migrate package, all inside
// one PostgreSQL schema of baton's own (Default, "baton", unless
// configured), so that baton can share a database with a host application
// whatever its tables are called.
//
// Migrations come in sets, each recorded in its own migrations table inside
// baton's schema: Core holds the distributor's tables (task rows, workers)
// and is all an embedding service needs; a workload built on baton brings
// its own set (NewSet), applied after Core — the pricing workload's is
// pricingschema.Set, which the worker command applies on top. A host's
// own migrations table (bun_migrations or any other) is never read or
// written, except to upgrade a database created before baton had a schema
// of its own (see Migrate).
//
// SQL text names baton's objects with Placeholder ({{.Schema}}.tasks);
// SQL rewrites it for the configured schema, and migrations are rendered the
// same way. New tables always go in new migration files of the set they
// belong to.
//
// Many workers may start at once against a fresh database. Migrations are
// serialised with a PostgreSQL session advisory lock rather than bun's lock
// table: a crashed migrator's session ends and the server releases the lock,
// whereas a lock row would stay held until someone removed it by hand.
package schema

import (
	"cmp"
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/migrate"

	"github.com/batonhq/baton/dbconn"
)

//go:embed migrations/core/*.sql
var coreFiles embed.FS

// advisoryLockKey identifies baton's migration lock among advisory locks
// ("baton-mg" as a 64-bit integer).
const advisoryLockKey int64 = 0x626174_6f6e2d6d67

// ErrPooled is returned by Migrate when the handle reaches PostgreSQL
// through a transaction pooler: the migration lock is a session advisory
// lock, which a pooler would take on one server connection and might try
// to release on another, leaving it held.
var ErrPooled = errors.New("migrating needs a direct connection to PostgreSQL, not a transaction pooler (it holds a session advisory lock): run worker migrate with --database-url pointing at the server itself")

// ErrOutdated is returned by Check when the database lacks migrations this
// binary knows about. Run "worker migrate".
var ErrOutdated = errors.New("database schema is older than this binary")

// ErrTooNew is returned by Check when the database has migrations this binary
// does not know about: an older binary must not run against a newer schema.
var ErrTooNew = errors.New("database schema is newer than this binary")

// Set is a sequence of migrations recorded in its own table,
// <schema>.<name>_migrations.
type Set struct {
	name  string
	files fs.FS
	dir   string
}

// Name is the set's name, which prefixes its migrations in Status.
func (s *Set) Name() string { return s.name }

func (s *Set) table(schemaName string) string {
	return Ident(schemaName) + "." + s.name + "_migrations"
}

// Core is the distributor's own tables: task rows and workers. An
// embedding service applies it alone, or before its own sets.
var Core = &Set{name: "core", files: coreFiles, dir: "migrations/core"}

// NewSet returns the migration set called name, whose migrations are the
// files at the root of files, named as bun's migrate package reads them
// (20261122000001_init.tx.up.sql). The set is recorded in
// <schema>.<name>_migrations; its SQL names baton's objects with
// {{.Schema}}. name must be a plain lower-case identifier and not "core".
// A workload registers its tables this way and passes its set, after Core,
// in Config.Sets.
func NewSet(name string, files fs.FS) *Set {
	if err := Validate(name); err != nil || name == "" || name == Core.name || strings.ToLower(name) != name {
		panic(fmt.Sprintf("schema.NewSet: invalid set name %q", name))
	}
	return &Set{name: name, files: files, dir: "."}
}

// Config says which sets to apply, or check, in which schema.
type Config struct {
	// Schema is the PostgreSQL schema holding baton's tables and
	// migrations tables. Defaults to Default ("baton").
	Schema string
	// Sets are the migration sets, applied in order. Defaults to Core
	// alone.
	Sets []*Set
}

func (c Config) withDefaults() (Config, error) {
	if err := Validate(c.Schema); err != nil {
		return c, err
	}
	if c.Schema == "" {
		c.Schema = Default
	}
	if len(c.Sets) == 0 {
		c.Sets = []*Set{Core}
	}
	return c, nil
}

func (s *Set) migrations() (*migrate.Migrations, error) {
	sub, err := fs.Sub(s.files, s.dir)
	if err != nil {
		return nil, fmt.Errorf("opening %s migrations: %w", s.name, err)
	}
	ms := migrate.NewMigrations()
	if err := ms.Discover(sub); err != nil {
		return nil, fmt.Errorf("discovering %s migrations: %w", s.name, err)
	}
	return ms, nil
}

// templateData is what migration files see: {{.Schema}} is the quoted
// schema name.
type templateData struct{ Schema string }

func (s *Set) migrator(db *bun.DB, schemaName string) (*migrate.Migrator, error) {
	ms, err := s.migrations()
	if err != nil {
		return nil, err
	}
	return migrate.NewMigrator(db, ms,
		migrate.WithTableName(s.table(schemaName)),
		migrate.WithLocksTableName(Ident(schemaName)+"."+s.name+"_migration_locks"),
		migrate.WithTemplateData(templateData{Schema: Ident(schemaName)}),
		migrate.WithMarkAppliedOnSuccess(true)), nil
}

// Migrate creates the schema if needed and applies every pending migration
// of cfg's sets (Core alone by default), returning the names of those it
// applied. It is safe to call from many processes at once: they queue on an
// advisory lock and all but the first find nothing left to do.
//
// A database created by a release of baton without a schema of its own
// (tables in the search path's schema, its migration recorded in that
// schema's bun_migrations) is upgraded first, in one transaction: its tables
// move into cfg.Schema with their data, both sets record their first
// migration as applied, and baton's row leaves bun_migrations. It is
// recognised only by baton's migration name in bun_migrations together
// with a tasks table of baton's columns, so a host's own tables and
// migrations are never mistaken for baton's.
//
// db must reach PostgreSQL directly: the lock is a session advisory lock.
// A handle that goes through a transaction pooler (db.Pooled: found by
// dbconn.Open, or described to dbconn.Wrap) is refused with ErrPooled.
func Migrate(ctx context.Context, db *dbconn.DB, cfg Config) ([]string, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("acquiring connection for migration lock: %w", err)
	}
	defer conn.Close()
	if db.Pooled() {
		return nil, ErrPooled
	}
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock(?)", advisoryLockKey); err != nil {
		return nil, fmt.Errorf("taking migration lock: %w", err)
	}
	defer func() {
		// A fresh context: the lock must be released even when ctx is done.
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(?)", advisoryLockKey)
	}()

	if _, err := db.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+Ident(cfg.Schema)); err != nil {
		return nil, fmt.Errorf("creating schema %s: %w", Ident(cfg.Schema), err)
	}
	upgraded, err := upgradeLegacy(ctx, db.DB, cfg.Schema, cfg.Sets)
	if err != nil {
		return nil, err
	}
	applied := upgraded
	for _, set := range cfg.Sets {
		m, err := set.migrator(db.DB, cfg.Schema)
		if err != nil {
			return nil, err
		}
		if err := m.Init(ctx); err != nil {
			return nil, fmt.Errorf("creating %s migration tables: %w", set.name, err)
		}
		group, err := m.Migrate(ctx)
		if err != nil {
			return nil, fmt.Errorf("applying %s migrations: %w", set.name, err)
		}
		for _, mig := range group.Migrations {
			applied = append(applied, set.name+"/"+mig.String())
		}
	}
	return applied, nil
}

// Status describes the database's schema relative to this binary. Names
// are prefixed with their set ("core/20261122000001_init").
type Status struct {
	Applied []string // applied migrations this binary knows, oldest first
	Pending []string // migrations this binary has that the database lacks
	Unknown []string // applied migrations this binary does not know
}

// Current reports whether the schema matches this binary exactly.
func (s Status) Current() bool { return len(s.Pending) == 0 && len(s.Unknown) == 0 }

// Inspect reads the status of cfg's sets without changing anything.
func Inspect(ctx context.Context, db *dbconn.DB, cfg Config) (Status, error) {
	var st Status
	cfg, err := cfg.withDefaults()
	if err != nil {
		return st, err
	}
	for _, set := range cfg.Sets {
		if err := set.inspect(ctx, db.DB, cfg.Schema, &st); err != nil {
			return st, err
		}
	}
	return st, nil
}

func (s *Set) inspect(ctx context.Context, db *bun.DB, schemaName string, st *Status) error {
	m, err := s.migrator(db, schemaName)
	if err != nil {
		return err
	}
	var exists sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT to_regclass(?)::text", s.table(schemaName)).Scan(&exists); err != nil {
		return fmt.Errorf("looking for %s migration table: %w", s.name, err)
	}
	if !exists.Valid {
		ms, err := s.migrations()
		if err != nil {
			return err
		}
		for _, mig := range ms.Sorted() {
			st.Pending = append(st.Pending, s.name+"/"+mig.String())
		}
		return nil
	}
	all, err := m.MigrationsWithStatus(ctx)
	if err != nil {
		return fmt.Errorf("reading applied %s migrations: %w", s.name, err)
	}
	for _, mig := range all {
		if mig.IsApplied() {
			st.Applied = append(st.Applied, s.name+"/"+mig.String())
		} else {
			st.Pending = append(st.Pending, s.name+"/"+mig.String())
		}
	}
	missing, err := m.MissingMigrations(ctx)
	if err != nil {
		return fmt.Errorf("reading applied %s migrations: %w", s.name, err)
	}
	for _, mig := range missing {
		st.Unknown = append(st.Unknown, s.name+"/"+mig.String())
	}
	return nil
}

// Check returns nil when cfg's sets are current, and otherwise an error
// wrapping ErrOutdated or ErrTooNew that tells the operator what to do: a
// *MissingError when the schema does not exist at all.
func Check(ctx context.Context, db *dbconn.DB, cfg Config) error {
	st, err := Inspect(ctx, db, cfg)
	if err != nil {
		return err
	}
	if len(st.Unknown) > 0 {
		return fmt.Errorf("%w: it has %s applied; upgrade this worker", ErrTooNew, strings.Join(st.Unknown, ", "))
	}
	if len(st.Pending) > 0 {
		name := cmp.Or(cfg.Schema, Default)
		if exists, err := Exists(ctx, db, name); err == nil && !exists {
			return &MissingError{Schema: name}
		}
		return fmt.Errorf("%w: %d migration(s) pending (%s); run \"worker migrate\" first",
			ErrOutdated, len(st.Pending), strings.Join(st.Pending, ", "))
	}
	return nil
}
