// Package tables is what each pricing package's Store is bound to: the
// pricing tables of one schema of one database.
package tables

import (
	"cmp"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/schema"
)

// Tables is the pricing tables in one PostgreSQL schema of a database.
type Tables struct {
	DB     *dbconn.DB
	Schema string // never empty
}

// New returns the pricing tables in schema schemaName of db; an empty
// schemaName means schema.Default ("baton").
func New(db *dbconn.DB, schemaName string) Tables {
	return Tables{DB: db, Schema: cmp.Or(schemaName, schema.Default)}
}

// SQL qualifies q's table names (schema.Placeholder) with the schema.
func (t Tables) SQL(q string) string { return schema.SQL(t.Schema, q) }
