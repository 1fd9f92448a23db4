package leader

import (
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/internal/leaserow"
	"github.com/batonhq/baton/schema"
)

// leaseTable is the leaderships table's leases held by owner, as the
// heartbeat renews them, with leases of ttl.
func leaseTable(db bun.IDB, schemaName, owner string, ttl time.Duration) *leaserow.Table {
	return &leaserow.Table{
		DB: db, Table: schema.Ident(schemaName) + ".leaderships", Key: "name", Owner: owner, TTL: ttl,
	}
}
