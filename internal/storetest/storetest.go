// Package storetest is the contract of the task store, as one conformance
// suite that every implementation runs: the PostgreSQL store
// (taskstore.Store) and the simulator's model of it (internal/sim). The
// model is only worth its schedules if it does what the SQL does; running
// both against the same cases is what keeps it from drifting.
//
// An implementation provides a Harness: the store's operations, in
// taskstore.Store's types, and a Fixture to set rows up and to move time
// past a lease or a registration (by back-dating, never by waiting). Every
// case gets a fresh, empty store. Durations are the suite's: leases and
// registrations last TTL, failures back off from Backoff up to MaxBackoff.
//
//	func TestStoreContract(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) storetest.Harness { return newHarness(t) })
//	}
//
// The lease tables that package leaserow renews (schedule's jobs, leader's
// leaderships) are not partitions: they have a contract of their own
// (LeaseHarness, RunLeases in lease.go), which each of those packages runs
// against its table as it configures it.
//
// Cases report through a *C rather than a *testing.T, so that a
// deliberately broken implementation can be run against the suite and its
// failures collected (Failures): a suite that a broken store passes checks
// nothing.
package storetest

import (
	"context"
	"fmt"
	"github.com/batonhq/baton/internal/leaseinfo"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/decide"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
)

// The suite's durations. Implementations use them for every lease,
// registration and failure back-off, and heartbeats rewrite only the
// leases with less than RenewBelow left: the threshold the distributor
// passes (decide.RenewBelow) for a lease of TTL renewed every
// HeartbeatInterval with the default safety margin.
const (
	TTL               = time.Minute
	HeartbeatInterval = TTL / 10
	SafetyMargin      = TTL / 5
	Backoff           = time.Second
	MaxBackoff        = 4 * time.Second
	// MaxPartitions is the room FairShareLoad is read with.
	MaxPartitions = 4
)

// RenewBelow is the heartbeat's rewrite threshold in the suite.
var RenewBelow = decide.RenewBelow(TTL, HeartbeatInterval, SafetyMargin)

// Store is the store's contract: the taskstore.Store statements that
// production code runs (package distributor; TestSuiteCoversProduction in
// package partition checks the list), with the lease duration, thresholds
// and back-offs fixed to the suite's.
type Store interface {
	Candidates(ctx context.Context, limit int) ([]taskstore.Candidate, error)
	StaleCandidates(ctx context.Context, limit int) ([]taskstore.Candidate, error)
	Claim(ctx context.Context, owner string, cands []taskstore.Candidate) ([]taskstore.Claimed, error)
	// HeartbeatBelow registers (or renews) owner's worker row, saying it
	// wants wanted more partitions, rewrites its listed leases with less
	// than RenewBelow left, returns the others Fresh, and hands back its
	// unlisted rows past their leases (taskstore.Store.HeartbeatBelow).
	HeartbeatBelow(ctx context.Context, owner string, wanted int, leases []partition.Lease) ([]leaseinfo.Renewal, error)
	Inspect(ctx context.Context, owner string, leases []partition.Lease) ([]leaseinfo.Owned, error)
	// Release is taskstore.Store.ReleaseFor.
	Release(ctx context.Context, owner string, leases []partition.Lease) ([]string, error)
	Fail(ctx context.Context, owner string, l partition.Lease, cause string, maxAttempts int) (taskstore.FailResult, error)
	Retry(ctx context.Context, key string) (bool, error)
	Progress(ctx context.Context, key string) (version, position int64, err error)
	// FairShareLoad is taskstore.Store.FairShareLoad for worker self with
	// room for MaxPartitions and leases of TTL.
	FairShareLoad(ctx context.Context, self string) (taskstore.Load, error)
	QuarantinedCount(ctx context.Context) (int, error)
	// SegmentsHeldByOthers is taskstore.Store.SegmentsHeldByOthers: the
	// pending items of the segments of partitions that owners other than
	// self hold under a live lease.
	SegmentsHeldByOthers(ctx context.Context, self string, partitions []string) (int64, error)
	// PendingWork is taskstore.Store.PendingWork: whether any partition
	// has work left that is not quarantined.
	PendingWork(ctx context.Context) (bool, error)
	StopWorker(ctx context.Context, owner string) error
	// Rewind is partition.Store.Rewind of the partition key to position
	// (with the empty state), in a transaction of its own. With
	// whileWaiting, it returns once the rewind has waited for a row lock,
	// whileWaiting was called during that wait, and the rewind ended.
	Rewind(ctx context.Context, key string, position int64, whileWaiting func()) (partition.Rewound, error)
	// Begin opens a batch's transaction and fences l for owner in it.
	Begin(ctx context.Context, owner string, l partition.Lease) (Batch, partition.Checkpoint, error)
	// BeginClaim opens the transaction of an unowned candidate's claim
	// with its first batch and fences the candidate in it
	// (taskstore.Store.FenceUnownedGroup, a group of one).
	BeginClaim(ctx context.Context, owner string, cand taskstore.Candidate) (ClaimBatch, partition.Checkpoint, error)
	// BeginGroup opens the transaction of a group of such claims and
	// fences up to limit of the candidates in it
	// (taskstore.Store.FenceUnownedGroup), returning those fenced.
	BeginGroup(ctx context.Context, owner string, cands []taskstore.Candidate, limit int) (GroupBatch, []taskstore.Fenced, error)
	// BeginHeld opens the transaction of a group of owner's held
	// partitions' batches (the distributor's held groups), whose members
	// are fenced in it one by one, each by its own lease.
	BeginHeld(ctx context.Context, owner string) (HeldBatch, error)
}

// HeldBatch is the transaction of a group of held partitions' batches.
type HeldBatch interface {
	// Fence fences l for the group's owner in the transaction
	// (taskstore.Store.Fence). A member lost there (partition.ErrFenced)
	// drops out; the transaction goes on for the others.
	Fence(ctx context.Context, l partition.Lease) (partition.Checkpoint, error)
	// Advance writes l's items from+1 … to and moves its checkpoint from
	// from to to.
	Advance(ctx context.Context, l partition.Lease, from, to int64) error
	Commit(ctx context.Context) error
	Rollback()
}

// GroupStep is one member of a group's claim: its first batch writes
// items From+1 … To, and Release releases it again.
type GroupStep struct {
	Candidate taskstore.Candidate
	From, To  int64
	Release   bool
}

// GroupBatch is the transaction of a group of claims made with their
// first batches, fenced.
type GroupBatch interface {
	// ClaimAdvanceGroup writes every step's items, then claims every
	// member, moves its checkpoint and releases those asked, all or
	// nothing (taskstore.Store.ClaimAdvanceGroup); it returns the
	// members' leases, or taskstore.ErrClaimLost.
	ClaimAdvanceGroup(ctx context.Context, steps []GroupStep) ([]partition.Lease, error)
	Commit(ctx context.Context) error
	Rollback()
}

// ClaimBatch is the transaction of a claim made with its first batch,
// fenced.
type ClaimBatch interface {
	// ClaimAdvance writes items from+1 … to, then claims the candidate
	// and moves its checkpoint from from to to, releasing it again with
	// release (taskstore.Store.ClaimAdvanceGroup, a group of one); it
	// returns the claim's lease.
	ClaimAdvance(ctx context.Context, from, to int64, release bool) (partition.Lease, error)
	Commit(ctx context.Context) error
	Rollback()
}

// Batch is a fenced transaction.
type Batch interface {
	// Advance writes items from+1 … to and moves the checkpoint from
	// from to to.
	Advance(ctx context.Context, from, to int64) error
	// Split writes segs as segment rows of the batch's partition
	// (taskstore.Store.Split) and moves its checkpoint from from to to
	// without processing anything, as a batch that splits does.
	Split(ctx context.Context, from, to int64, segs []taskstore.Segment) error
	Commit(ctx context.Context) error
	Rollback()
}

// Fixture sets rows up and moves time for the cases.
type Fixture interface {
	// AddPartition creates a partition with available items of work.
	AddPartition(key string, available int64)
	// Produce adds n items of work to a partition.
	Produce(key string, n int64)
	// ExpireLease makes the partition's lease (or back-off) end in the
	// past; it leaves unleased and quarantined rows alone.
	ExpireLease(key string)
	// ExpireWorker makes owner's registration end in the past.
	ExpireWorker(owner string)
	// AgeLease makes the partition's lease end in left from now (a
	// running lease only).
	AgeLease(key string, left time.Duration)
	// Pause and Resume pause and resume the partition, as an operator
	// does (partition.Store.Pause, Resume), between the store's
	// statements.
	Pause(key string)
	Resume(key string)
}

// Harness is one implementation under test.
type Harness interface {
	Store
	Fixture
}

// Kinds is a Harness whose store keeps partitions of several kinds
// (taskstore.Store.Kind) apart: Store and Fixture work on the default
// kind, and the suite's kind cases run only against a harness that
// implements Kinds (the simulator's model has one kind, which its workers
// share).
type Kinds interface {
	// OfKind is the store's operations on the partitions of kind.
	OfKind(kind string) Store
	// AddPartitionOfKind creates a partition of kind with available
	// items of work.
	AddPartitionOfKind(kind, key string, available int64)
	// ExpireLeaseOfKind is ExpireLease for the partition of kind.
	ExpireLeaseOfKind(kind, key string)
}

// C is a running case: its context and its failures.
type C struct {
	Ctx  context.Context
	errs []string
}

type fatal struct{}

// Errorf records a failure and continues.
func (c *C) Errorf(format string, args ...any) { c.errs = append(c.errs, fmt.Sprintf(format, args...)) }

// Fatalf records a failure and ends the case.
func (c *C) Fatalf(format string, args ...any) {
	c.Errorf(format, args...)
	panic(fatal{})
}

// Case is one contract.
type Case struct {
	Name string
	Run  func(c *C, h Harness)
}

// kindCasePrefix begins the names of the cases that need a harness that
// implements Kinds.
const kindCasePrefix = "Kinds/"

// Applies reports whether k runs against h: a kind case (named Kinds/...)
// only against a harness that implements Kinds.
func (k Case) Applies(h Harness) bool {
	_, ok := h.(Kinds)
	return ok || !strings.HasPrefix(k.Name, kindCasePrefix)
}

// Check runs one case against h and returns its failures (none if the
// case does not apply to h).
func Check(ctx context.Context, k Case, h Harness) (errs []string) {
	if !k.Applies(h) {
		return nil
	}
	return check(ctx, func(c *C) { k.Run(c, h) })
}

// check runs a case's body and returns its failures.
func check(ctx context.Context, run func(c *C)) (errs []string) {
	c := &C{Ctx: ctx}
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(fatal); !ok {
				c.Errorf("panic: %v\n%s", r, debug.Stack())
			}
		}
		errs = c.errs
	}()
	run(c)
	return c.errs
}

// Run runs every case as a subtest, each against a fresh store from
// newHarness.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	for _, k := range Cases() {
		t.Run(k.Name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			if !k.Applies(h) {
				t.Skip("the store under test has one kind")
			}
			for _, e := range Check(t.Context(), k, h) {
				t.Error(e)
			}
		})
	}
}

// Failures runs every case against fresh stores from newHarness and
// returns, by case name, the failures of those that failed: for checking
// that a broken implementation does not pass.
func Failures(t *testing.T, newHarness func(t *testing.T) Harness) map[string]string {
	out := map[string]string{}
	for _, k := range Cases() {
		if errs := Check(t.Context(), k, newHarness(t)); len(errs) > 0 {
			out[k.Name] = strings.Join(errs, "; ")
		}
	}
	return out
}
