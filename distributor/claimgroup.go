package distributor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/batonhq/baton/internal/dberr"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Partitions nobody owns, claimed with their first batches: one
// transaction of the pipeline (txn.go) whose fence locks the unowned rows
// at the versions read and whose record step claims them as it advances
// them (claimStatements). Alone, or several in one transaction
// (Config.ClaimGroup, GroupProcessor): one fence statement for them all,
// the processor's group, one statement that claims them all and records
// their checkpoints, history and releases, one commit. A member lost at
// the fence is dropped from the group; any other failure rolls the whole
// group back, and each member is then claimed with its first batch on its
// own, which records a processor error against the member that causes it.

// claimFreshAll claims unowned candidates with their first batches: in
// groups of up to ClaimGroup when the processor implements GroupProcessor,
// each in its own transaction otherwise. riders (riders.go) are shared out
// among the groups beyond the room cands take; spares are more candidates,
// shared out likewise, that a group fences in place of members it loses
// at its fence (up to its size, never more).
func (d *Distributor) claimFreshAll(cands, riders, spares []taskstore.Candidate) {
	gp, size := d.claimGroupSize(len(cands) + len(riders))
	groups := (len(cands) + size - 1) / size
	for ; groups > 0; groups-- {
		n := (len(cands) + groups - 1) / groups
		r := (len(riders) + groups - 1) / groups
		g := slices.Concat(cands[:n], riders[:r])
		cands, riders = cands[n:], riders[r:]
		var sp []taskstore.Candidate
		if len(g) > 1 {
			k := (len(spares) + groups - 1) / groups
			sp = spares[:k:k]
			spares = spares[k:]
		}
		d.mu.Lock()
		for _, c := range g {
			d.claiming[c.Key] = c.Backlog
		}
		for _, c := range sp {
			d.claiming[c.Key] = 0
		}
		d.mu.Unlock()
		keep := len(g)
		if r > 0 {
			keep = n
		}
		d.wg.Add(1)
		go d.runClaim(gp, g, sp, keep)
	}
}

// runClaim claims cands (reserved by claimFreshAll) with their first
// batches in one transaction, holding on to at most keep of them after it
// (riders.go), and does what follows it: the members committed are
// reported and released or held on; those lost at the fence are skipped
// for a while; after a rollback each member of a group is claimed with its
// first batch on its own, and a lone one on its own without it
// (claimAlone).
func (d *Distributor) runClaim(gp GroupProcessor, cands, spares []taskstore.Candidate, keep int) {
	defer d.wg.Done()
	t, cs := d.claimTxn(gp, cands, spares, keep)
	err := d.runTxn(t)
	members := make([]taskstore.Candidate, len(t.members))
	for i, m := range t.members {
		members[i] = m.cand
	}
	d.unreserve(cs.untried...)
	if t.lone && errors.Is(err, errClaimLost) {
		// Lost at its claim statement as its transaction ended: as if at
		// its fence.
		cs.lost, members, err = members, nil, nil
	}
	if d.claimsLost(t, cs.lost) {
		defer d.wake()
	}
	if err == nil {
		d.claimsCommitted(t)
		return
	}
	d.claimRolledBack(t, err, members)
}

// unreserve ends claimFreshAll's reservation of cands.
func (d *Distributor) unreserve(cands ...taskstore.Candidate) {
	d.mu.Lock()
	for _, c := range cands {
		delete(d.claiming, c.Key)
	}
	d.mu.Unlock()
}

// claimsLost notes the candidates of t lost at its fence. Another worker
// is processing them (or claimed them): skipped for a while rather than
// picked again from the head of the index, where they still read as
// claimable. Lost to this worker's own dying transaction instead, they are
// tried again at the next poll. It reports whether the claim loop is to be
// woken once t's claim is over: a group's room is given back then, so
// that it is filled by a group of its own rather than claim by claim while
// this group runs.
func (d *Distributor) claimsLost(t *txn, lost []taskstore.Candidate) (wake bool) {
	if len(lost) == 0 {
		return false
	}
	d.mu.Lock()
	others := d.noteLost(lost)
	d.mu.Unlock()
	if others > 0 {
		d.emit(Event{Kind: EventClaimLost, Items: others})
	}
	return others > 0 || !t.lone
}

// claimsCommitted reports t's committed claims and releases or holds each
// on. The members released with their batches leave the worker's count
// together, before the claim loop is woken: a round woken by the first
// would otherwise see room for only one.
func (d *Distributor) claimsCommitted(t *txn) {
	released := false
	d.mu.Lock()
	for _, m := range t.members {
		if m.released {
			delete(d.claiming, m.lease.Key)
			released = true
		}
	}
	d.mu.Unlock()
	for _, m := range t.members {
		if m.committed {
			d.claimedWithBatch(t, m)
		}
	}
	if released || !t.lone {
		d.wake()
	}
}

// claimRolledBack does what follows t's rollback (err) for its members
// (still reserved): leave them claimable, or claim each on its own.
func (d *Distributor) claimRolledBack(t *txn, err error, members []taskstore.Candidate) {
	switch {
	case errors.Is(err, errClaimBusy):
		// Rolled back, still unowned at its version: tried again at the
		// next poll. Noted as lost, it would be skipped for StaleAfter by
		// this worker as by every other claimer that lost its fence to
		// this one, and the partition would wait that long for an owner.
		d.unreserve(members...)
		d.emit(Event{Kind: EventClaimLost, Items: 1})
		d.log.Debug("claim with its first batch found its row locked by a producer; the partition stays claimable",
			d.cfg.KeyAttr, members[0].Key, "error", err)
	case t.unknown:
		// If the commit applied, every member is owned (or released)
		// with a lease nobody renews: those expire and are taken over,
		// confirmed, from the committed checkpoints.
		d.unreserve(members...)
		d.log.Warn("claim with first batches: commit outcome unknown; leaving the leases to expire",
			d.cfg.KeyAttr, members[0].Key, "partitions", len(members), "error", err)
	case d.isLeaving() || context.Cause(d.abandon) != nil:
		d.unreserve(members...) // rolled back: nothing held, nothing to hand back
	case !errors.Is(err, errClaimLost) && dberr.TooLong(err):
		d.claimTooLong(t, err, members)
	case !errors.Is(err, errClaimLost) && (dberr.Transient(err) || errors.Is(err, partition.ErrCheckpointMoved)):
		// Rolled back, every member claimable as before: the next poll
		// tries again (the database may be out of reach; nothing was
		// lost, so this is no warning).
		d.unreserve(members...)
		d.log.Debug("claim with first batches failed with a transient error; the partitions stay claimable",
			d.cfg.KeyAttr, members[0].Key, "partitions", len(members), "error", err)
		if !t.lone {
			d.wake()
		}
	case t.lone:
		// The processor failed (or the batch broke a rule): rolled back.
		// Claim it and record the failure, so that it backs off and is
		// quarantined after MaxAttempts as any failed batch.
		d.claimAlone(members[0], err)
	default:
		// A member's claim was lost after processing, the processor
		// failed, or the group took longer than a lease: rolled back.
		// Each member is claimed with its first batch on its own, which
		// finds a lost one at its fence, records a processor error
		// against its partition, and runs a long batch under heartbeats.
		d.log.Debug("claim of a group with its first batches rolled back; claiming each on its own",
			"partitions", len(members), "error", err)
		d.claimEachAlone(t, members)
	}
}

// claimTooLong follows a rollback because the first batches took longer
// than a lease, or than the statement timeout. Fewer items from now on
// (sizing.go): a lone partition is claimed on its own and runs its
// batches under heartbeats, which renew the lease while a batch runs; each
// member of a group is claimed with its first batch on its own (forming
// the same group again would fail the same way, for ever).
func (d *Distributor) claimTooLong(t *txn, err error, members []taskstore.Candidate) {
	if errors.Is(err, context.DeadlineExceeded) {
		// Given up mid-statement: the server may hold the rows a while
		// longer; their own claims must not take that for another
		// worker's claim.
		d.markDying(members)
	}
	if t.lone {
		limit, _ := d.size.batchTooLong(t.tried, t.elapsed)
		d.log.Info("first batch too long for one transaction; claiming the partition on its own with smaller batches",
			d.cfg.KeyAttr, members[0].Key, "items", t.tried, "batch_limit", limit, "error", err)
		d.claimAlone(members[0], nil)
		return
	}
	limit := d.size.groupTooLong(t.tried, t.elapsed)
	d.log.Info("claim of a group with its first batches too long for one transaction; claiming each on its own",
		"partitions", len(members), "items", t.tried, "group_limit", limit, "error", err)
	d.claimEachAlone(t, members)
}

// claimEachAlone claims each of a rolled-back group's members (still
// reserved) with its first batch in a transaction of its own; those
// beyond the room t was formed for (its riders, or spares in their place)
// are released after it, caught up or not.
func (d *Distributor) claimEachAlone(t *txn, members []taskstore.Candidate) {
	for i, c := range members {
		keep := 1
		if i >= t.keep {
			keep = 0
		}
		d.wg.Add(1)
		go d.runClaim(nil, []taskstore.Candidate{c}, nil, keep)
	}
}

// claimedWithBatch reports a committed claim made with its first batch and
// either ends it (released with that batch; runClaim took it out of the
// worker's count) or holds the partition on: leader mode, or work left
// after the first batch.
func (d *Distributor) claimedWithBatch(t *txn, m *member) {
	c := taskstore.Claimed{Lease: m.lease, Position: m.cp.Position, Available: m.cp.Available}
	d.reportClaim(c)
	d.reportCheckpoint(m.lease, m.items, m.res.Position, t.elapsed)
	if m.released {
		reason := m.releaseReason()
		d.emit(Event{Kind: EventReleased, Key: m.lease.Key, Version: m.lease.Version, Reason: reason})
		d.log.Info("released partition", "event", "released", d.cfg.KeyAttr, m.lease.Key, "version", m.lease.Version,
			"reason", reason, "with_batch", true, "with_claim", true)
		return
	}
	c.Position = m.res.Position // after its first batch
	d.startHeld(c, t.sent, true, nil, true)
}

// claimTxn is the transaction claiming cands with their first batches:
// alone (one candidate) or as a group processed by gp, with spares.
func (d *Distributor) claimTxn(gp GroupProcessor, cands, spares []taskstore.Candidate, keep int) (*txn, *claimStatements) {
	cs := &claimStatements{d: d, cands: cands, untried: spares}
	// A first batch may take no longer than a lease less the safety
	// margin, as any batch's local deadline allows; one that would is
	// rolled back and claimed on its own, to run under heartbeats.
	t := &txn{stmts: cs, lone: len(cands) == 1, group: gp, deadline: d.cfg.StaleAfter - d.cfg.SafetyMargin,
		spanName: "baton.claim_group", members: make([]*member, len(cands)), keep: keep, limitKeep: keep < len(cands)}
	for i, c := range cands {
		t.members[i] = claimMember(c)
	}
	t.what = fmt.Sprintf("claim of %d partitions with their first batches", len(cands))
	if t.lone {
		t.what = fmt.Sprintf("claim of %s with its first batch", t.members[0].lease)
	}
	return t, cs
}

// claimStatements fence unowned candidates and claim them with their
// first batches' checkpoints.
type claimStatements struct {
	d     *Distributor
	cands []taskstore.Candidate
	// untried are the spares, and once fenced those the fence did not
	// need; lost are the candidates lost at the fence.
	untried, lost []taskstore.Candidate
}

// fence fences the candidates (and spares in place of those lost) in one
// statement, in key order (FenceUnownedGroup: a lone candidate is a group
// of one), and makes those fenced the transaction's members. The lease
// each will have if the claim commits is the version read plus one: the
// processor writes under it, and its output commits with the claim or not
// at all.
func (s *claimStatements) fence(ctx context.Context, t *txn) ([]*member, error) {
	tried := slices.SortedFunc(slices.Values(slices.Concat(s.cands, s.untried)), func(a, b taskstore.Candidate) int {
		return strings.Compare(a.Key, b.Key)
	})
	// A lone candidate is a group of one: missing from the result, it was
	// lost (another claim transaction holds it, or it moved).
	fenced, err := t.store.FenceUnownedGroup(ctx, tried, len(s.cands))
	if err != nil {
		return nil, causeOr(ctx, err)
	}
	// The fence tried candidates in key order until it had fenced as many
	// as the group's size: those it passed over were lost, those after
	// the last it fenced were not tried (when it stopped at the limit).
	if len(fenced) == len(s.cands) {
		last := fenced[len(fenced)-1].Key
		i, _ := slices.BinarySearchFunc(tried, last, func(c taskstore.Candidate, k string) int { return strings.Compare(c.Key, k) })
		tried, s.untried = tried[:i+1], tried[i+1:]
	} else {
		s.untried = nil
	}
	in := make(map[string]partition.Checkpoint, len(fenced))
	for _, f := range fenced {
		in[f.Key] = f.Checkpoint
	}
	made := make(map[string]*member, len(t.members))
	for _, m := range t.members {
		made[m.lease.Key] = m
	}
	t.members = make([]*member, 0, len(fenced))
	for _, c := range tried {
		cp, ok := in[c.Key]
		if !ok {
			s.lost = append(s.lost, c)
			continue
		}
		m := made[c.Key]
		if m == nil { // a spare
			m = claimMember(c)
		}
		m.state, m.cp = memberIn, cp
		t.members = append(t.members, m)
	}
	return t.members, nil
}

// releaseReason is why m is released with its batch: it caught up, or it
// is beyond the room of its claim (riders.go).
func (m *member) releaseReason() string {
	if m.noRoom {
		return reasonNoRoom
	}
	return "caught_up"
}

// reasonNoRoom is the release reason of a claim group's member released
// before it caught up, beyond the room the group was formed for.
const reasonNoRoom = "no_room"

// claimMember is the member claiming c: its lease, if the claim commits,
// is the version read plus one.
func claimMember(c taskstore.Candidate) *member {
	m := newMember(partition.Lease{Key: c.Key, Version: c.Version + 1})
	m.cand = c
	return m
}

// record claims every member, records its checkpoint and history and, in
// lock mode when caught up, releases it, in one statement, all or nothing
// (ClaimAdvanceGroup, for a lone member as for a group), in a "baton.claim"
// span (and a lone member's release in a "baton.release" span over the
// same statement). Each member's checkpoint
// stores its batch span's trace context. A lone claim that finds its
// fenced row locked (errClaimBusy) lost no race.
func (s *claimStatements) record(ctx context.Context, t *txn) error {
	d, in := s.d, t.in
	steps := make([]taskstore.ClaimStep, len(in))
	released := 0
	for i, m := range in {
		steps[i] = taskstore.ClaimStep{Candidate: m.cand, From: m.cp.Position, Position: m.res.Position,
			State: m.res.State, Release: m.release, Reason: m.releaseReason(), Traceparent: traceparentOf(m.ctx)}
		if m.release {
			released++
		}
	}
	sctx, span := tracer.Start(ctx, "baton.claim", trace.WithAttributes(attribute.Int("baton.candidates", len(steps)),
		attribute.String("baton.worker", d.worker.InstanceID), attribute.Bool("baton.with_batch", true),
		attribute.Int("baton.released", released)))
	var rspan trace.Span
	if t.lone && released > 0 {
		_, rspan = tracer.Start(sctx, "baton.release", d.leaseAttrs(in[0].lease), trace.WithAttributes(
			attribute.String("baton.reason", in[0].releaseReason()), attribute.Bool("baton.with_batch", true),
			attribute.Bool("baton.with_claim", true)))
	}
	t.sent = d.cfg.Clock.Now()
	// A lone member is a group of one; its step's trace context is its
	// batch span's, which is also the statement's context.
	_, err := t.store.ClaimAdvanceGroup(ctx, d.cfg.StaleAfter, steps, "caught_up")
	won := 0
	if err == nil {
		won = len(steps)
	}
	span.SetAttributes(attribute.Int("baton.won", won))
	if rspan != nil {
		endSpan(rspan, err)
	}
	endSpan(span, err)
	if err != nil {
		if t.lone && errors.Is(err, errClaimLost) && ctx.Err() == nil {
			err = fmt.Errorf("%w: %v", errClaimBusy, err)
		}
		return causeOr(ctx, err)
	}
	for _, m := range in {
		m.released = m.release
	}
	return nil
}
