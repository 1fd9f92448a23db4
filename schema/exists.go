package schema

import (
	"context"
	"fmt"

	"github.com/batonhq/baton/dbconn"
)

// Exists reports whether the PostgreSQL schema name exists in db's
// database, whatever it holds. A schema that Check finds lacking
// migrations (ErrOutdated) may not exist at all: a mistyped name, or a
// database never migrated, which no wait for a migration cures.
func Exists(ctx context.Context, db *dbconn.DB, name string) (bool, error) {
	var exists bool
	if err := db.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = ?)", name).Scan(&exists); err != nil {
		return false, fmt.Errorf("checking whether schema %s exists: %w", name, err)
	}
	return exists, nil
}
