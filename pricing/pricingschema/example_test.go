package pricingschema_test

import (
	"context"
	"fmt"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/pricing/pricingschema"
	"github.com/batonhq/baton/schema"
)

// Applying the pricing tables with baton's core tables, here into a schema
// named "billing": the sets are applied in order, core first. Applying
// them again, as every worker does at start, changes nothing.
func Example() {
	db, done := pgtest.ExampleDB()
	defer done()
	ctx := context.Background()
	cfg := schema.Config{Schema: "billing", Sets: pricingschema.Sets()}

	before, err := schema.Inspect(ctx, db, cfg)
	if err != nil {
		panic(err)
	}
	applied, err := schema.Migrate(ctx, db, cfg)
	if err != nil {
		panic(err)
	}
	fmt.Printf("applied every pending migration: %v, the first %s\n", len(applied) == len(before.Pending), applied[0])
	again, err := schema.Migrate(ctx, db, cfg)
	if err != nil {
		panic(err)
	}
	after, err := schema.Inspect(ctx, db, cfg)
	if err != nil {
		panic(err)
	}
	fmt.Printf("applied again: %d; current: %v\n", len(again), after.Current())

	var tables []string
	err = db.NewSelect().Table("information_schema.tables").Column("table_name").
		Where("table_schema = 'billing'").
		Where("table_name IN ('contracts', 'tiers', 'records', 'priced', 'tasks')").
		Order("table_name").Scan(ctx, &tables)
	if err != nil {
		panic(err)
	}
	fmt.Println(tables)
	// Output:
	// applied every pending migration: true, the first core/20261122000001_init
	// applied again: 0; current: true
	// [contracts priced records tasks tiers]
}
