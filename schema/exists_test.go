package schema_test

import (
	"context"
	"testing"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/schema"
)

// An empty database has no baton schema; a migrated one has it.
func TestExists(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	empty := pgtest.OpenDB(t, pgtest.NewEmptyURL(t), dbconn.Options{})
	if ok, err := schema.Exists(ctx, empty, schema.Default); err != nil || ok {
		t.Fatalf("Exists on an empty database = %v, %v; want false", ok, err)
	}
	migrated := pgtest.NewDB(t)
	if ok, err := schema.Exists(ctx, pgtest.Handle(migrated), schema.Default); err != nil || !ok {
		t.Fatalf("Exists on a migrated database = %v, %v; want true", ok, err)
	}
}
