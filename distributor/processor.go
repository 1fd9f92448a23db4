package distributor

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/batonhq/baton/partition"
	"github.com/uptrace/bun"
)

// Processor processes a partition's work, one batch at a time.
type Processor interface {
	// Process handles the next work items of b.Lease.Key after
	// b.Checkpoint.Position (at most b.Limit of them), writing its output
	// through b.Tx, and returns the new checkpoint. The distributor records
	// the checkpoint in the same transaction and commits it only if the
	// claim is still current, so output and checkpoint are committed
	// together or not at all, and only by the partition's owner.
	//
	// ctx is cancelled when ownership is lost; Process must not keep
	// writing after that (its transaction would be rolled back anyway).
	// Side effects outside b.Tx are at least once: use b.IdempotencyKey.
	Process(ctx context.Context, b *Batch) (Result, error)
}

// ProcessorFunc adapts a function to Processor.
type ProcessorFunc func(ctx context.Context, b *Batch) (Result, error)

// Process calls f.
func (f ProcessorFunc) Process(ctx context.Context, b *Batch) (Result, error) { return f(ctx, b) }

// Kinded is a Processor of one kind of partitions only (Config.Kind), as a
// job's kind names its queue: New takes the distributor's kind from it when
// Config.Kind is empty, and refuses a Config.Kind that differs, so that it
// is never handed another processor's partitions. The pricer is one (kind
// "pricing").
type Kinded interface {
	Processor
	// Kind is the kind of partitions the processor handles; see
	// partition.ValidateKind.
	Kind() string
}

// Batch is one unit of work handed to a Processor.
type Batch struct {
	// Kind is the kind of the partition (Config.Kind).
	Kind string
	// Lease is the claim under which the batch runs.
	Lease partition.Lease
	// Owner is this worker's instance id.
	Owner string
	// Tx is the fenced transaction: the task row is locked and verified
	// to belong to Lease. Exec, QueryRaw and CopyFrom run in it too.
	Tx bun.Tx
	// Checkpoint is the committed progress, read under the fence.
	Checkpoint partition.Checkpoint
	// Limit is the most work items to process.
	Limit int
	// Partition is the partition whose items the batch holds: Lease.Key,
	// or, for a segment (see Splitter), the partition it was split from.
	// Read the items, and key the output, by Partition.
	Partition string

	conn *txConn // the connection Tx runs on; nil for a batch made by hand
}

// IdempotencyKey names the batch's items for side effects outside the
// database: the same items always get the same key, whoever processes them.
// It is KEY/POSITION for partition.DefaultKind, and KIND/KEY/POSITION for
// any other, so partitions of the same name under other kinds never share
// a key (a kind has no "/").
func (b *Batch) IdempotencyKey() string {
	if b.Kind == "" || b.Kind == partition.DefaultKind {
		return fmt.Sprintf("%s/%d", b.Lease.Key, b.Checkpoint.Position)
	}
	return fmt.Sprintf("%s/%s/%d", b.Kind, b.Lease.Key, b.Checkpoint.Position)
}

// Result is a batch's new checkpoint.
type Result struct {
	// Position is the new checkpoint position; it must lie in
	// (Checkpoint.Position, Checkpoint.Available].
	Position int64
	// State is processor-defined checkpoint state (JSON), stored with
	// Position. Nil stores {}.
	State json.RawMessage
}

// GroupProcessor is a Processor that can also process batches of several
// partitions in one transaction. A worker with room for several partitions
// nobody owns claims them together (Config.ClaimGroup): one transaction
// fences them all, hands them to ProcessGroup, then claims them and
// records every checkpoint in one statement and commits once, so that tiny
// partitions share the statements and the WAL flush that each would
// otherwise pay alone; in lock mode, while there is more work than room,
// a group also carries riders, small partitions beyond the worker's room
// (up to ClaimGroup members in all) released by its commit (riders.go).
// Likewise, the batches of partitions the worker
// holds that become ready while another of its batches is in flight run
// together once it ends: one transaction fences each by its own claim,
// hands them to ProcessGroup, records every checkpoint and commits once.
// Processors that do not implement it are given each partition on its
// own, as before.
type GroupProcessor interface {
	Processor
	// ProcessGroup handles one batch of each of g.Batches, all through
	// g.Tx, and returns their new checkpoints, one Result per batch in
	// the same order, each as Process would return it for that batch
	// alone. The distributor records them all in the same transaction
	// and commits only if every partition's claim is won (or, Owned,
	// still current), so every member's output commits with every
	// member's checkpoint or none does.
	//
	// An error fails the whole group: its transaction rolls back and
	// each member is then processed on its own (Process), so that an
	// error is recorded against the partition that causes it. ctx is
	// cancelled as for Process; for an Owned group, when any member's
	// ownership is lost.
	ProcessGroup(ctx context.Context, g *Group) ([]Result, error)
}

// Group is batches of several partitions in one transaction that fences
// them all: either the first batches of partitions claimed together, or
// (Owned) the next batches of partitions this worker owns.
type Group struct {
	// Owner is this worker's instance id.
	Owner string
	// Tx is the fenced transaction: every member's task row is locked
	// and verified to be still unowned at the version read (a claim's
	// first batch), or still owned by Owner under the member's Lease
	// (Owned).
	Tx bun.Tx
	// Batches are the members, in partition_key order, each with its
	// Lease (the claim that commits with the group, or that holds the
	// partition), Checkpoint and Limit; their Tx is the group's.
	// A member may be a segment (Batch.Partition) and may resume from any
	// checkpoint, as for Process.
	Batches []*Batch
	// Owned reports that the members are partitions this worker owns
	// already (their claims committed earlier), not first batches of
	// claims made with the group.
	Owned bool

	conn *txConn // the connection Tx runs on
}

// Splitter is a Processor whose partitions can be split: the items after
// any of a partition's split points can be processed by anyone who holds
// the state that point carries, with no other knowledge of the items
// before it. Pricing is one: a record's amounts depend only on the tiers,
// its amount and the cumulative gross of the contract's earlier records,
// which the records themselves give.
//
// A batch that finds more than 2 × Config.SegmentRecords items pending on
// a partition (not itself a segment) asks Split where they may be split,
// and, if it gives any split point, writes in its own fenced transaction
// one task row per segment (partition.SegmentKey: items (start, next
// start], the first starting at the checkpoint, with the state it carries)
// and moves the partition's checkpoint past them all, to Available with
// End. Segments are claimed, heartbeated, confirmed, fenced, checkpointed,
// taken over and released exactly as partitions are, by any worker, at the
// same time; they get no more work, and are released once caught up, in
// either Mode. Work added to the partition later is processed by the
// partition from End, whatever the segments' progress. A processor that is
// not a Splitter (ordered side effects, say) is never split.
type Splitter interface {
	Processor
	// Split returns where the pending items of b's partition,
	// (b.Checkpoint.Position, b.Checkpoint.Available], may be split into
	// segments of about size items: split points in increasing order,
	// strictly between Position and Available, each with the checkpoint
	// state a segment starting there carries, and End, the state at
	// Available. It runs in b.Tx, under the partition's fence, and writes
	// nothing. No points (or an empty Split) leaves the partition whole:
	// the batch then goes on to Process.
	Split(ctx context.Context, b *Batch, size int64) (Split, error)
}

// Split is where a partition's pending items are split (Splitter).
type Split struct {
	// Points are the starts of the segments after the first (which starts
	// at the checkpoint), in increasing order.
	Points []SplitPoint
	// End is the checkpoint state after the last pending item: the
	// partition's own, from which work added later is processed.
	End json.RawMessage
}

// SplitPoint is the start of a segment: it holds the items after
// Position, and is processed from State.
type SplitPoint struct {
	Position int64
	State    json.RawMessage
}
