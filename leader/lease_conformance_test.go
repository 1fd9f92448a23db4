package leader

import (
	"context"
	"github.com/batonhq/baton/internal/leaseinfo"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/storetest"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/schema"
)

// The leaderships table's leases keep the lease tables' contract, as the
// elector's heartbeat renews them (leaseTable).
func TestLeadershipLeaseContract(t *testing.T) {
	t.Parallel()
	storetest.RunLeases(t, func(t *testing.T) storetest.LeaseHarness {
		return &leadershipLeases{t: t, db: pgtest.NewDB(t)}
	})
}

// leadershipLeases runs the contract against baton.leaderships; its
// fixtures write the rows directly, back-dating instead of waiting.
type leadershipLeases struct {
	t  *testing.T
	db *bun.DB
}

func (h *leadershipLeases) exec(query string, args ...any) {
	h.t.Helper()
	if _, err := h.db.ExecContext(context.Background(), query, args...); err != nil {
		h.t.Fatalf("fixture: %v", err)
	}
}

func (h *leadershipLeases) Renew(ctx context.Context, owner string, leases []partition.Lease) ([]leaseinfo.Renewal, error) {
	return leaseTable(h.db, schema.Default, owner, storetest.TTL).Renew(ctx, leases)
}

func (h *leadershipLeases) Inspect(ctx context.Context, owner string, leases []partition.Lease) ([]leaseinfo.Owned, error) {
	return leaseTable(h.db, schema.Default, owner, storetest.TTL).Inspect(ctx, leases)
}

func (h *leadershipLeases) AddLease(key, owner string, left time.Duration) partition.Lease {
	h.exec(`INSERT INTO baton.leaderships (name, version, owner, elected_at, heartbeat_at, lease_expires_at)
		VALUES (?, 1, ?, now(), now(), now() + ? * interval '1 microsecond')`, key, owner, left.Microseconds())
	return partition.Lease{Key: key, Version: 1}
}

func (h *leadershipLeases) TakeOver(key, owner string) {
	h.exec(`UPDATE baton.leaderships SET version = version + 1, owner = ?, elected_at = now(), heartbeat_at = now(),
		lease_expires_at = now() + ? * interval '1 microsecond' WHERE name = ?`, owner, storetest.TTL.Microseconds(), key)
}

// BreakExtra: a leadership has no condition beyond its owner and version.
func (h *leadershipLeases) BreakExtra(string) bool { return false }
