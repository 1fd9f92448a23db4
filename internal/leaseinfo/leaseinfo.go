// Package leaseinfo is what renewing and re-reading leases report, shared
// by the renewal service (internal/keepalive) and the stores that renew
// leases on their rows (internal/taskstore, internal/leaserow).
package leaseinfo

import (
	"time"

	"github.com/batonhq/baton/partition"
)

// Renewal is one lease a heartbeat found still held, with its work
// counters: renewed, or, when another transaction had its row locked, left
// as it was (Locked) with the time it has left by the database clock.
type Renewal struct {
	partition.Lease
	Available int64 // items produced (high-water mark)
	Position  int64 // checkpoint position
	// Locked says the row was locked by another transaction (a load
	// adding work, a batch recording its checkpoint), so the lease was not
	// renewed this time. It is still this owner's for Remaining.
	Locked bool
	// Fresh says the lease had more left than the heartbeat renews
	// (the renewal threshold), so it was checked, still this owner's, but not
	// renewed. It is this owner's for Remaining.
	Fresh     bool
	Remaining time.Duration // lease time left, database clock (Locked or Fresh)
	// Paused says the partition (or its kind) is paused: the owner
	// releases it at its next batch boundary.
	Paused bool
}

// Owned is what a re-read says about a lease: that it is still this
// owner's, and how long it has left by the database clock.
type Owned struct {
	partition.Lease
	Remaining time.Duration // lease time left, database clock
}
