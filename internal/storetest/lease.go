package storetest

import (
	"context"
	"github.com/batonhq/baton/internal/leaseinfo"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/partition"
)

// The lease tables' contract. Scheduled jobs (schedule's jobs) and
// leaderships (leader's leaderships) are rows owned by the task row's
// protocol, renewed and re-read by package leaserow for the heartbeat
// service; the partition Store above has no place for them, so they have
// a contract of their own, which each table runs with its own leaserow
// configuration (its key column and Extra condition):
//
//	func TestLeaseContract(t *testing.T) {
//		storetest.RunLeases(t, func(t *testing.T) storetest.LeaseHarness { return newLeaseHarness(t) })
//	}
//
// Leases last TTL, as in the Store's contract.

// LeaseTable is a lease table's renewals, as package leaserow runs them
// for owner with leases of TTL.
type LeaseTable interface {
	// Renew is leaserow.Table.Renew for owner.
	Renew(ctx context.Context, owner string, leases []partition.Lease) ([]leaseinfo.Renewal, error)
	// Inspect is leaserow.Table.Inspect for owner.
	Inspect(ctx context.Context, owner string, leases []partition.Lease) ([]leaseinfo.Owned, error)
}

// LeaseFixture sets a lease table's rows up and moves time, by
// back-dating, never by waiting.
type LeaseFixture interface {
	// AddLease creates a row of key held by owner whose lease ends in
	// left from now (in the past if left is negative), and returns its
	// lease.
	AddLease(key, owner string, left time.Duration) partition.Lease
	// TakeOver makes another owner's claim take the row: version bumped,
	// owner set to owner, a lease of TTL.
	TakeOver(key, owner string)
	// BreakExtra makes the row fail the table's Extra condition (for
	// jobs, a run past its deadline) and reports whether the table has
	// one; a table without one leaves the row alone.
	BreakExtra(key string) bool
}

// LeaseHarness is one lease table under test.
type LeaseHarness interface {
	LeaseTable
	LeaseFixture
}

// LeaseCase is one contract of the lease tables.
type LeaseCase struct {
	Name string
	Run  func(c *C, h LeaseHarness)
}

// LeaseCases is the lease tables' suite, one case per contract.
func LeaseCases() []LeaseCase {
	return []LeaseCase{
		{"Renew/OnlyRowsHeldByTheOwnerAtTheirVersion", leaseRenewHeld},
		{"Renew/ExtendsToTTLOnTheDatabaseClock", leaseRenewExtends},
		{"Renew/RenewsAnExpiredLeaseStillHeld", leaseRenewExpired},
		{"Renew/OnlyRowsMeetingTheExtraCondition", leaseRenewExtra},
		{"Renew/NothingToRenew", leaseRenewEmpty},
		{"Inspect/RemainingTimeWithoutRenewing", leaseInspect},
		{"Inspect/OnlyRowsHeldByTheOwnerAtTheirVersion", leaseInspectHeld},
		{"Inspect/NothingToReread", leaseInspectEmpty},
	}
}

// CheckLease runs one lease case against h and returns its failures.
func CheckLease(ctx context.Context, k LeaseCase, h LeaseHarness) []string {
	return check(ctx, func(c *C) { k.Run(c, h) })
}

// RunLeases runs every lease case as a subtest, each against a fresh table
// from newHarness.
func RunLeases(t *testing.T, newHarness func(t *testing.T) LeaseHarness) {
	for _, k := range LeaseCases() {
		t.Run(k.Name, func(t *testing.T) {
			t.Parallel()
			for _, e := range CheckLease(t.Context(), k, newHarness(t)) {
				t.Error(e)
			}
		})
	}
}

// LeaseFailures runs every lease case against fresh tables from
// newHarness and returns, by case name, the failures of those that
// failed: for checking that a broken renewal does not pass.
func LeaseFailures(t *testing.T, newHarness func(t *testing.T) LeaseHarness) map[string]string {
	out := map[string]string{}
	for _, k := range LeaseCases() {
		if errs := CheckLease(t.Context(), k, newHarness(t)); len(errs) > 0 {
			out[k.Name] = strings.Join(errs, "; ")
		}
	}
	return out
}
