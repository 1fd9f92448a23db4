package pricer

import (
	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/partition"
)

// Partitions is the store of the pricing partitions (kind Kind) in schema
// schemaName of db: the only task rows that are contracts. Partitions of
// other processors sharing the schema are left alone.
func Partitions(db *dbconn.DB, schemaName string) *partition.Store {
	return partition.NewStore(db, schemaName).Kind(Kind)
}
