// Package schema owns baton's database schema: versioned SQL migrations
// embedded in the binary and applied with bun's migrate package.
//
// Many workers may start at once against a fresh database. Migrations are
// serialised with a PostgreSQL session advisory lock rather than bun's lock
// table: a crashed migrator's session ends and the server releases the lock,
// whereas a lock row would stay held until someone removed it by hand.
package schema

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"strings"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/migrate"

	"github.com/batonhq/baton/internal/dbconn"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// advisoryLockKey identifies baton's migration lock among advisory locks
// ("baton-mg" as a 64-bit integer).
const advisoryLockKey int64 = 0x626174_6f6e2d6d67

// migrationsTable is where bun records applied migrations.
const migrationsTable = "bun_migrations"

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

func migrations() (*migrate.Migrations, error) {
	ms := migrate.NewMigrations()
	if err := ms.Discover(migrationFiles); err != nil {
		return nil, fmt.Errorf("discovering embedded migrations: %w", err)
	}
	return ms, nil
}

func newMigrator(db *bun.DB) (*migrate.Migrator, error) {
	ms, err := migrations()
	if err != nil {
		return nil, err
	}
	return migrate.NewMigrator(db, ms,
		migrate.WithTableName(migrationsTable),
		migrate.WithMarkAppliedOnSuccess(true)), nil
}

// Migrate applies every pending migration and returns the names of those it
// applied. It is safe to call from many processes at once: they queue on an
// advisory lock and all but the first find nothing left to do.
func Migrate(ctx context.Context, db *bun.DB) ([]string, error) {
	m, err := newMigrator(db)
	if err != nil {
		return nil, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("acquiring connection for migration lock: %w", err)
	}
	defer conn.Close()
	if dbconn.Pooled(db) {
		return nil, ErrPooled
	}
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock(?)", advisoryLockKey); err != nil {
		return nil, fmt.Errorf("taking migration lock: %w", err)
	}
	defer func() {
		// A fresh context: the lock must be released even when ctx is done.
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(?)", advisoryLockKey)
	}()

	if err := m.Init(ctx); err != nil {
		return nil, fmt.Errorf("creating migration tables: %w", err)
	}
	group, err := m.Migrate(ctx)
	if err != nil {
		return nil, fmt.Errorf("applying migrations: %w", err)
	}
	var applied []string
	for _, mig := range group.Migrations {
		applied = append(applied, mig.String())
	}
	return applied, nil
}

// Status describes the database's schema relative to this binary.
type Status struct {
	Applied []string // applied migrations this binary knows, oldest first
	Pending []string // migrations this binary has that the database lacks
	Unknown []string // applied migrations this binary does not know
}

// Current reports whether the schema matches this binary exactly.
func (s Status) Current() bool { return len(s.Pending) == 0 && len(s.Unknown) == 0 }

// Inspect reads the schema status without changing anything.
func Inspect(ctx context.Context, db *bun.DB) (Status, error) {
	var st Status
	m, err := newMigrator(db)
	if err != nil {
		return st, err
	}
	var exists sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT to_regclass(?)::text", migrationsTable).Scan(&exists); err != nil {
		return st, fmt.Errorf("looking for migration table: %w", err)
	}
	if !exists.Valid {
		ms, err := migrations()
		if err != nil {
			return st, err
		}
		for _, mig := range ms.Sorted() {
			st.Pending = append(st.Pending, mig.String())
		}
		return st, nil
	}
	all, err := m.MigrationsWithStatus(ctx)
	if err != nil {
		return st, fmt.Errorf("reading applied migrations: %w", err)
	}
	for _, mig := range all {
		if mig.IsApplied() {
			st.Applied = append(st.Applied, mig.String())
		} else {
			st.Pending = append(st.Pending, mig.String())
		}
	}
	missing, err := m.MissingMigrations(ctx)
	if err != nil {
		return st, fmt.Errorf("reading applied migrations: %w", err)
	}
	for _, mig := range missing {
		st.Unknown = append(st.Unknown, mig.String())
	}
	return st, nil
}

// Check returns nil when the schema is current, and otherwise an error
// wrapping ErrOutdated or ErrTooNew that tells the operator what to do.
func Check(ctx context.Context, db *bun.DB) error {
	st, err := Inspect(ctx, db)
	if err != nil {
		return err
	}
	if len(st.Unknown) > 0 {
		return fmt.Errorf("%w: it has %s applied; upgrade this worker", ErrTooNew, strings.Join(st.Unknown, ", "))
	}
	if len(st.Pending) > 0 {
		return fmt.Errorf("%w: %d migration(s) pending (%s); run \"worker migrate\" first",
			ErrOutdated, len(st.Pending), strings.Join(st.Pending, ", "))
	}
	return nil
}
