package schedule

import (
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/internal/leaserow"
	"github.com/batonhq/baton/schema"
)

// leaseTable is the jobs table's leases held by owner, as the heartbeat
// renews them, with leases of ttl.
func leaseTable(db bun.IDB, schemaName, owner string, ttl time.Duration) *leaserow.Table {
	return &leaserow.Table{
		DB: db, Table: schema.Ident(schemaName) + ".jobs", Key: "name", Owner: owner, TTL: ttl,
		// A run past its deadline is not renewed: a hung runner loses the
		// job and another worker takes it over.
		Extra: "t.state = 'idle' OR t.run_deadline > now()",
	}
}
