// Package pricingschema is the pricing workload's migration set: the
// contracts, tiers, loads, record chunks and priced output tables, in
// baton's schema beside the core task tables. It is applied after
// schema.Core:
//
//	schema.Migrate(ctx, db, schema.Config{Sets: []*schema.Set{schema.Core, pricingschema.Set}})
//
// New pricing tables and changes go in new files under migrations/.
package pricingschema

import (
	"embed"
	"io/fs"

	"github.com/batonhq/baton/schema"
)

//go:embed migrations/*.sql
var files embed.FS

// Set is the pricing workload's migrations, recorded in
// <schema>.pricing_migrations.
var Set = schema.NewSet("pricing", mustSub(files, "migrations"))

// Sets are the sets the pricing worker applies and checks, in order.
func Sets() []*schema.Set { return []*schema.Set{schema.Core, Set} }

func mustSub(f fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(f, dir)
	if err != nil {
		panic(err)
	}
	return sub
}

// RolesSQL creates the least-privilege roles baton_worker and baton_loader
// with exactly the grants the pricing worker and the loader need. It names
// baton's tables with {{.Schema}}: run schema.SQL(schemaName, RolesSQL) as
// the database owner after migrating Sets().
//
//go:embed roles.sql
var RolesSQL string
