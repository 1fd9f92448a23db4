package schedule

import (
	"context"
	"database/sql"
	"github.com/batonhq/baton/internal/leaseinfo"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/internal/leaserow"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/storetest"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/schema"
)

// The jobs table's leases keep the lease tables' contract, as the
// scheduler's heartbeat renews them (leaseTable, with its run deadline).
func TestJobLeaseContract(t *testing.T) {
	t.Parallel()
	storetest.RunLeases(t, func(t *testing.T) storetest.LeaseHarness {
		return &jobLeases{t: t, db: pgtest.NewDB(t)}
	})
}

// jobLeases runs the contract against baton.jobs; its fixtures write the
// rows directly, back-dating instead of waiting.
type jobLeases struct {
	t  *testing.T
	db *bun.DB
}

func (h *jobLeases) exec(query string, args ...any) {
	h.t.Helper()
	if _, err := h.db.ExecContext(context.Background(), query, args...); err != nil {
		h.t.Fatalf("fixture: %v", err)
	}
}

func (h *jobLeases) Renew(ctx context.Context, owner string, leases []partition.Lease) ([]leaseinfo.Renewal, error) {
	return leaseTable(h.db, schema.Default, owner, storetest.TTL).Renew(ctx, leases)
}

func (h *jobLeases) Inspect(ctx context.Context, owner string, leases []partition.Lease) ([]leaseinfo.Owned, error) {
	return leaseTable(h.db, schema.Default, owner, storetest.TTL).Inspect(ctx, leases)
}

func (h *jobLeases) AddLease(key, owner string, left time.Duration) partition.Lease {
	h.exec(`INSERT INTO baton.jobs (name, every_us, lock_at_most_for_us, next_run, version, owner, heartbeat_at, lease_expires_at)
		VALUES (?, 60000000, 60000000, now(), 1, ?, now(), now() + ? * interval '1 microsecond')`, key, owner, left.Microseconds())
	return partition.Lease{Key: key, Version: 1}
}

func (h *jobLeases) TakeOver(key, owner string) {
	h.exec(`UPDATE baton.jobs SET version = version + 1, owner = ?, heartbeat_at = now(),
		lease_expires_at = now() + ? * interval '1 microsecond' WHERE name = ?`, owner, storetest.TTL.Microseconds(), key)
}

// BreakExtra starts a run whose deadline has passed.
func (h *jobLeases) BreakExtra(key string) bool {
	h.exec(`UPDATE baton.jobs SET state = 'running', running_slot = next_run,
		run_deadline = now() - interval '1 millisecond' WHERE name = ?`, key)
	return true
}

// brokenJobLeases is jobLeases with a renewal broken on purpose.
type brokenJobLeases struct {
	*jobLeases
	table func(db bun.IDB, owner string) *leaserow.Table
	renew func(h *brokenJobLeases, ctx context.Context, owner string, leases []partition.Lease) ([]leaseinfo.Renewal, error)
}

func (h *brokenJobLeases) Renew(ctx context.Context, owner string, leases []partition.Lease) ([]leaseinfo.Renewal, error) {
	if h.renew != nil {
		return h.renew(h, ctx, owner, leases)
	}
	return h.table(h.db, owner).Renew(ctx, leases)
}

func (h *brokenJobLeases) Inspect(ctx context.Context, owner string, leases []partition.Lease) ([]leaseinfo.Owned, error) {
	return h.table(h.db, owner).Inspect(ctx, leases)
}

// The lease cases catch a renewal that breaks its contract: each broken
// variant fails the case that states what it breaks.
func TestJobLeaseContractCatchesBrokenRenewals(t *testing.T) {
	t.Parallel()
	jobs := func(db bun.IDB, owner string) *leaserow.Table {
		return leaseTable(db, schema.Default, owner, storetest.TTL)
	}
	for _, tc := range []struct {
		name  string
		cases []string // the cases it must fail
		h     func(h *brokenJobLeases)
	}{
		{"renews runs past their deadline", []string{"Renew/OnlyRowsMeetingTheExtraCondition"}, func(h *brokenJobLeases) {
			h.table = func(db bun.IDB, owner string) *leaserow.Table {
				tbl := jobs(db, owner)
				tbl.Extra = ""
				return tbl
			}
		}},
		{"reports every lease renewed", []string{"Renew/OnlyRowsHeldByTheOwnerAtTheirVersion", "Renew/NothingToRenew"},
			func(h *brokenJobLeases) {
				h.renew = func(h *brokenJobLeases, ctx context.Context, owner string, leases []partition.Lease) ([]leaseinfo.Renewal, error) {
					if _, err := jobs(h.db, owner).Renew(ctx, leases); err != nil {
						return nil, err
					}
					out := make([]leaseinfo.Renewal, len(leases))
					for i, l := range leases {
						out[i] = leaseinfo.Renewal{Lease: l}
					}
					return out, nil
				}
			}},
		{"extends past the TTL", []string{"Renew/ExtendsToTTLOnTheDatabaseClock"}, func(h *brokenJobLeases) {
			h.table = func(db bun.IDB, owner string) *leaserow.Table {
				return leaseTable(db, schema.Default, owner, 2*storetest.TTL)
			}
		}},
		{"re-reading renews", []string{"Inspect/RemainingTimeWithoutRenewing"}, func(h *brokenJobLeases) {
			h.table = func(db bun.IDB, owner string) *leaserow.Table {
				tbl := jobs(db, owner)
				return &leaserow.Table{DB: &renewingDB{IDB: db, tbl: tbl}, Table: tbl.Table, Key: tbl.Key,
					Extra: tbl.Extra, Owner: tbl.Owner, TTL: tbl.TTL}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, name := range tc.cases {
				k := leaseCase(t, name)
				h := &brokenJobLeases{jobLeases: &jobLeases{t: t, db: pgtest.NewDB(t)}, table: jobs}
				tc.h(h)
				if errs := storetest.CheckLease(t.Context(), k, h); len(errs) == 0 {
					t.Errorf("a renewal that %s passes %s", tc.name, name)
				}
			}
		})
	}
}

func leaseCase(t *testing.T, name string) storetest.LeaseCase {
	t.Helper()
	for _, k := range storetest.LeaseCases() {
		if k.Name == name {
			return k
		}
	}
	t.Fatalf("no lease case %s", name)
	return storetest.LeaseCase{}
}

// renewingDB renews tbl's leases before every query it is given: a
// re-read that renews.
type renewingDB struct {
	bun.IDB
	tbl *leaserow.Table
}

func (d *renewingDB) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if _, err := d.IDB.ExecContext(ctx, `UPDATE baton.jobs SET lease_expires_at = now() + ? * interval '1 microsecond'
		WHERE owner = ?`, d.tbl.TTL.Microseconds(), d.tbl.Owner); err != nil {
		return nil, err
	}
	return d.IDB.QueryContext(ctx, query, args...)
}
