package ingest

import (
	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/pricing/internal/tables"
)

// Store is the pricing tables of one schema of one database, as the loader
// fills them: Load adds tiers and records, Loads reads what loads did.
type Store struct{ t tables.Tables }

// NewStore returns the pricing tables in PostgreSQL schema schemaName
// (empty means schema.Default, "baton") of db.
func NewStore(db *dbconn.DB, schemaName string) *Store {
	return &Store{tables.New(db, schemaName)}
}
