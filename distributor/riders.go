package distributor

import (
	"github.com/batonhq/baton/internal/decide"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
)

// Riders: small partitions claimed in a group beyond MaxPartitions.
//
// A claim group's members are as many as the worker has room for
// (MaxPartitions less what it holds or is claiming): 8 at the defaults.
// Partitions of a few hundred items each cost the group's transaction
// (fence, claim, checkpoints, commit, the output's COPY) more than their
// items, and a worker with room for 8 prices them 8 to a transaction
// however large ClaimGroup is. Yet in lock mode such a partition is
// released with the commit that claims it (its first batch catches it
// up), so it never takes a slot after the transaction, and the
// transaction takes one connection whatever its members.
//
// So a round that claims unowned partitions with their first batches
// fills each group, up to ClaimGroup members, with riders: unowned
// partitions (not segments) whose pending items, as the round read them,
// are no more than a batch starts at (BatchSize's start, 1,000 at the
// defaults: where a transaction's fixed cost is a large part of its
// time) and fit a member's share of the group bound, within the items
// the group bound leaves after the members the room allowed. Larger
// partitions gain little from sharing a transaction, whose fixed cost
// their own batches already spread thin. A rider is fenced,
// processed, checkpointed and claimed exactly as the other members, in
// the same statements; what differs is that a group with riders holds on
// to no more members after its commit than the room it was formed for
// (txn.keep): a member not caught up beyond those (its backlog grew since
// it was read, or the bound shrank) is released at its new position with
// reason "no_room", claimable again at once, its work resumed by the next
// claim from the checkpoint committed. The worker therefore never holds
// more than MaxPartitions, and riders change neither what is locked nor
// when: a rider's row is locked by the group's fence and claim statements
// like any member's (docs/protocol.md, "Claim in groups" and "Riders").
//
// Riders are taken only in lock mode (a leader keeps what it claims),
// when the processor groups (GroupProcessor, ClaimGroup >= 2), and while
// the worker's room rather than its share bounds it: where the share is
// smaller than the room, there are not enough partitions for the workers'
// room, and riders would take the others' share of them. A group rolled
// back is claimed member by member, as any group; a rider claimed alone is
// still released after its first batch, caught up or not.

// claimGroupSize is the most members a claim group of n candidates (with
// its riders) has: 1 when the processor does not group or n is below 2.
func (d *Distributor) claimGroupSize(n int) (GroupProcessor, int) {
	gp, ok := d.proc.(GroupProcessor)
	if !ok || d.cfg.ClaimGroup < 2 || n < 2 {
		return gp, 1
	}
	// No more members than the group's items allow (one each at least).
	return gp, max(1, min(d.cfg.ClaimGroup, d.size.groupLimit()))
}

// pickRiders takes the riders of a round's claim groups out of cands, for
// the groups fresh are claimed in.
func (d *Distributor) pickRiders(fresh, cands []taskstore.Candidate) (riders, rest []taskstore.Candidate) {
	if len(fresh) == 0 || !d.releasesCaughtUp(false) {
		return nil, cands
	}
	// The groups fresh are claimed in, were there riders.
	_, size := d.claimGroupSize(len(fresh) + 1)
	if size < 2 {
		return nil, cands
	}
	groups := (len(fresh) + size - 1) / size
	// Riders are the partitions whose transaction costs more than their
	// items: no more than a batch starts at (1,000 items at the
	// defaults), and within a member's bound.
	member := int64(min(d.size.memberLimit(d.cfg.ClaimGroup), d.size.start()))
	items := int64(groups) * int64(d.size.groupLimit())
	for _, c := range fresh {
		items -= min(c.Backlog, member)
	}
	return decide.PickRiders(cands, notOwnedOrSegment, candBacklog, groups*size-len(fresh), member, items)
}

// notOwnedOrSegment reports whether a candidate may ride: unowned, and
// not a segment (a segment is as large as its split made it, and is
// left to the backlog share).
func notOwnedOrSegment(c taskstore.Candidate) bool {
	_, _, seg := partition.ParseSegmentKey(c.Key)
	return !c.Owned && !seg
}
