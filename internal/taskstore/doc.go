// Package taskstore holds the protocol's statements on baton's task
// table: the reads of claimable partitions (Candidates, StaleCandidates,
// from a claim floor: FloorMargin), the claims (Claim, and
// ClaimAdvanceGroup with first batches), the heartbeat (HeartbeatBelow,
// Inspect), the fence and checkpoint of a batch (Fence, FenceUnownedGroup,
// Advance), releases and failures
// (Release, ReleaseFor, Fail), the fair-share inputs (FairShareLoad,
// PendingWork, QuarantinedCount), a worker's stop (StopWorker) and the
// history the protocol writes (Record, RecordFirstBatch, PruneEvents).
// A fenced transaction takes its statements from one Txn (Store.InTx): its
// fence, checkpoint or claim, release and first-batch history, on its tx.
// Package distributor runs them (its renewals through package heartbeat); the
// safety argument, in docs/protocol.md, is stated in terms of these
// statements.
//
// It imports package partition for the types the statements share with
// their public callers (partition.Lease, partition.Checkpoint,
// leaseinfo.Owned, leaseinfo.Renewal, the events and notifications), and
// partition does not import it: the producers' and operators' statements
// (AddWork, Status, Progress, Retry, History) are partition.Store's, which
// Store.Admin returns over the same rows.
//
// Every statement names its kind and locks task rows in (kind,
// partition_key) order with the lock modes Store's documentation lists.
// The conformance suite (internal/storetest) runs against Store here and
// against the simulator's model (internal/sim); coverage_test.go keeps it
// covering every statement the workers run.
package taskstore
