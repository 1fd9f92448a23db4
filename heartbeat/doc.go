// Package heartbeat documents baton's liveness protocol: how a worker keeps
// the leases it holds (partitions, scheduled jobs' runs, leaderships) alive
// and how it learns that it lost one. The renewal service itself is
// internal to baton (the distributor, package leader and the scheduler
// run it); what an embedder or operator sees of it is here: the defaults
// of its timings and the causes with which a lost lease's context is
// cancelled.
//
// Every Interval (IntervalDefault) the worker renews itself and all the
// leases it holds with one statement. For each lease it keeps:
//
//   - a streak of consecutive successful renewals; a lease taken over from
//     another worker is confirmed, and its work starts, once the streak
//     reaches Confirm (ConfirmDefault);
//   - a local deadline on the worker's own monotonic clock: the send time
//     of the last successful renewal plus the remaining lease (StaleAfter,
//     StaleAfterDefault, from the database's now()) minus a safety margin.
//     When it passes, even if the database cannot be reached, the lease's
//     context is cancelled with ErrLeaseExpired, so a cut-off worker stops
//     before anybody else can claim the partition;
//   - a context, cancelled with ErrOwnershipLost as soon as a renewal shows
//     the lease is no longer this worker's, and with ErrReleased when the
//     worker gives it up.
//
// A lease whose row another transaction holds locked (a load adding work
// to it) is skipped by that renewal, not waited for: the others are
// renewed, and the skipped one keeps the time it has left by the database
// clock, which its local deadline follows. It is lost only if it runs out
// before a later renewal gets through: the renewal is tried again a quarter
// of an interval later, up to three times before the next beat, so a row
// locked for a moment (the owner's own batch committing) costs nothing. A
// lease with plenty of time left may be checked without being renewed; it
// still counts towards confirmation.
//
// A renewal that fails without a server error (connection lost, reply
// never arrived) has an unknown outcome: it may have applied. It is
// resolved by re-reading the leases, never by guessing, so a write whose
// reply was lost does not cost the lease.
//
// distributor/doc.go gives the safety argument that rests on these rules.
package heartbeat

import (
	"errors"
	"time"
)

// ErrOwnershipLost is the cancellation cause of a lease that a renewal
// showed to be held by someone else (or released, or quarantined).
var ErrOwnershipLost = errors.New("partition ownership lost")

// ErrLeaseExpired is the cancellation cause of a lease whose local deadline
// passed without a successful renewal.
var ErrLeaseExpired = errors.New("lease expired locally without a successful heartbeat")

// ErrReleased is the cancellation cause of a lease the worker gave up.
var ErrReleased = errors.New("partition released")

// Defaults of the liveness protocol's timings, which the distributor,
// package leader and the scheduler take unless configured otherwise.
const (
	// IntervalDefault is the time between renewals.
	IntervalDefault = time.Second
	// StaleAfterDefault is the lease length.
	StaleAfterDefault = 10 * time.Second
	// ConfirmDefault is how many consecutive renewals a lease taken over
	// must survive before its work starts.
	ConfirmDefault = 3
)
