package pricer

import (
	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/pricing/internal/tables"
)

// Store is the pricing tables of one schema of one database: what a
// pricing run reads and keeps besides the batches themselves (progress,
// verification, retention), and the processor that prices them.
//
// Methods without the Tx suffix run on the handle; their Tx twins run in
// the caller's transaction, for a caller that wants several reads in one
// snapshot (REPEATABLE READ) or beside writes of its own.
type Store struct{ t tables.Tables }

// NewStore returns the pricing tables in PostgreSQL schema schemaName
// (empty means schema.Default, "baton") of db: the same schema as the
// distributor's.
func NewStore(db *dbconn.DB, schemaName string) *Store {
	return &Store{tables.New(db, schemaName)}
}

// Processor returns a new pricing processor for the store's tables, to run
// under a distributor of kind Kind over the same schema.
func (s *Store) Processor() *Processor { return newProcessor(s.t.Schema) }
