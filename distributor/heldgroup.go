package distributor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/dberr"
	"github.com/batonhq/baton/partition"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Held groups: the batches of several held partitions of one worker,
// committed in one transaction (GroupProcessor, Config.ClaimGroup > 1).
// No timer decides when a group forms. A held partition's loop about to
// run a batch runs it at once, alone (batch.go), unless a batch
// transaction of another held partition of this worker is in flight: then
// it queues its batch. When a transaction in flight ends, the queue (up to
// ClaimGroup members, and no more than the group's items allow at one each)
// runs as one transaction, led by the first member's own goroutine, while
// later arrivals queue behind it. So a worker whose partitions are busy
// runs one batch transaction at a time, each carrying the batches of all
// the partitions that became ready meanwhile, and a lone partition's batch
// starts exactly when it did before.
//
// The group's transaction fences every member (Store.Fence, each by its
// own lease version and owner, in partition_key order), hands the members
// to ProcessGroup, advances every checkpoint (the compare-and-set of a
// lone batch, in the same order), releases the members that caught up in
// lock mode (and caught-up segments in leader mode) in one statement, and
// commits once. A member lost at the fence drops out and its loop sees
// the fence's error, as after a lone batch's fence. A member found caught
// up at the fence gets the lone batch's answer (caught up, nothing done).
// A member that would be split (split.go) runs its batch alone after the
// group. Any other failure rolls the whole group back and each member then
// runs its batch alone, so that a processor error, a batch too long or a
// transient error is met, counted and retried by the partition that causes
// it. The group's context ends when any member's lease context does (that
// member's fence would fail the commit anyway, so there is no point in
// going on): the group rolls back and the others go on alone. Only
// partitions whose claim has committed a batch already (held.started) take
// part: a takeover's first batch, which records its history and links its
// trace to the previous owner's, always runs alone.
//
// The group's batches take at most the group bound in all (at most
// ClaimGroupItems), shared among the members as for a group of first
// batches (shareItems: each at most the batch bound), and feed the same
// sizer, by time as lone batches do (sizing.go): the group bound by the
// group's items and duration, so that a slow group makes the next one
// smaller and quick ones grow it back, and the batch bound once per
// group, by its largest member's items and the group's duration.

// heldQueue is the worker's held-batch transactions in flight and the
// batches waiting for them.
type heldQueue struct {
	mu       sync.Mutex
	inFlight int
	waiting  []*queuedBatch
}

// queuedBatch is a held partition's batch waiting for the transaction in
// flight to end.
type queuedBatch struct {
	h    *held
	turn chan heldTurn // buffered (1): whoever sends never waits
}

// heldTurn is what a queued batch is told when its wait ends.
type heldTurn struct {
	// lead: run these members (this batch first) as one transaction,
	// counted in flight already.
	lead []*queuedBatch
	// alone: run the batch on its own (the group failed, or the member
	// would split).
	alone bool
	// res is the batch's outcome in a group that another member led.
	res heldResult
}

// heldResult is a batch's outcome, as batch returns it.
type heldResult struct {
	items              int64
	caughtUp, released bool
	err                error
}

// heldBatch runs h's next batch: alone at once when no other held batch
// of the worker is in flight (or groups are off, or h must run alone),
// otherwise with the batches queued meanwhile, in one transaction.
func (d *Distributor) heldBatch(h *held) (items int64, caughtUp, released bool, err error) {
	gp, ok := d.proc.(GroupProcessor)
	q := &d.heldQ
	if !ok || d.cfg.ClaimGroup < 2 || !h.started {
		q.mu.Lock()
		q.inFlight++
		q.mu.Unlock()
		defer d.heldBatchEnded()
		return d.batch(h)
	}
	q.mu.Lock()
	if q.inFlight == 0 {
		q.inFlight++
		q.mu.Unlock()
		defer d.heldBatchEnded()
		return d.batch(h)
	}
	qb := &queuedBatch{h: h, turn: make(chan heldTurn, 1)}
	q.waiting = append(q.waiting, qb)
	q.mu.Unlock()
	var t heldTurn
	lctx := h.lease.Context()
	select {
	case t = <-qb.turn:
	case <-lctx.Done():
		q.mu.Lock()
		if i := slices.Index(q.waiting, qb); i >= 0 {
			q.waiting = slices.Delete(q.waiting, i, i+1)
			q.mu.Unlock()
			return 0, false, false, context.Cause(lctx)
		}
		q.mu.Unlock()
		// Taken into a group already: its context ends with this lease,
		// and its leader answers at once.
		t = <-qb.turn
	}
	switch {
	case t.lead != nil:
		defer d.heldBatchEnded()
		r := d.runHeldGroup(gp, t.lead)
		return r.items, r.caughtUp, r.released, r.err
	case t.alone:
		q.mu.Lock()
		q.inFlight++
		q.mu.Unlock()
		defer d.heldBatchEnded()
		return d.batch(h)
	}
	return t.res.items, t.res.caughtUp, t.res.released, t.res.err
}

// heldBatchEnded counts a held batch's transaction out, and hands the
// batches queued meanwhile to the first of them, to run as one group.
func (d *Distributor) heldBatchEnded() {
	q := &d.heldQ
	q.mu.Lock()
	defer q.mu.Unlock()
	q.inFlight--
	if len(q.waiting) == 0 {
		return
	}
	n := min(len(q.waiting), d.cfg.ClaimGroup, max(1, d.size.groupLimit()))
	lead := slices.Clone(q.waiting[:n])
	q.waiting = slices.Delete(q.waiting, 0, n)
	q.inFlight++
	lead[0].turn <- heldTurn{lead: lead}
}

// runHeldGroup runs the members' batches as one transaction, tells every
// member but the first its outcome (or to run alone), and returns the
// first's, which it runs alone itself if need be.
func (d *Distributor) runHeldGroup(gp GroupProcessor, members []*queuedBatch) heldResult {
	self := members[0].h
	if len(members) == 1 {
		items, caughtUp, released, err := d.batch(self)
		return heldResult{items, caughtUp, released, err}
	}
	hs := make([]*held, len(members))
	for i, m := range members {
		hs[i] = m.h
	}
	res, alone, err := d.heldGroup(gp, hs)
	if err != nil {
		d.log.Debug("batches of a group of held partitions rolled back; each runs alone",
			"partitions", len(hs), "error", err)
	}
	var own heldResult
	for i, m := range members {
		switch {
		case i == 0:
			own = res[0]
		case alone[i]:
			m.turn <- heldTurn{alone: true}
		default:
			m.turn <- heldTurn{res: res[i]}
		}
	}
	if alone[0] {
		items, caughtUp, released, err := d.batch(self)
		return heldResult{items, caughtUp, released, err}
	}
	return own
}

// heldGroup runs one transaction over the batches of hs: fence, the
// processor's group, checkpoints, releases, commit. It returns each
// member's outcome, or that it is to run alone; err is the group's
// failure, if any (every member it concerns is then to run alone).
func (d *Distributor) heldGroup(gp GroupProcessor, hs []*held) (res []heldResult, alone []bool, err error) {
	n := len(hs)
	res, alone = make([]heldResult, n), make([]bool, n)
	order := make([]int, n) // members in partition_key order: the order of their locks
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(hs[a].lease.Key, hs[b].lease.Key) })
	// in are the members in the transaction after the fence; they run
	// alone if it fails.
	var in []int
	defer func() {
		if err != nil {
			for _, i := range in {
				alone[i] = true
				res[i] = heldResult{}
			}
		}
	}()

	ctx, cancel := context.WithCancelCause(d.base)
	defer cancel(nil)
	stops := []func() bool{context.AfterFunc(d.abandon, func() { cancel(context.Cause(d.abandon)) })}
	for _, h := range hs {
		lctx := h.lease.Context()
		key := h.lease.Key
		stops = append(stops, context.AfterFunc(lctx, func() {
			cancel(fmt.Errorf("lease of %s ended: %w", key, context.Cause(lctx)))
		}))
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	start := d.cfg.Clock.Now()
	for _, h := range hs {
		h.tried = 0
	}
	defer func() {
		took := d.cfg.Clock.Since(start)
		for _, h := range hs {
			h.took = took
		}
	}()
	ctx, span := tracer.Start(ctx, "baton.batch_group", trace.WithAttributes(
		attribute.String("baton.worker", d.worker.InstanceID), attribute.Int("baton.group", n)))
	var total int64
	defer func() {
		span.SetAttributes(attribute.Int64("baton.items", total), attribute.Int("baton.members", len(in)))
		endSpan(span, err)
	}()
	all := func() { in = slices.Clone(order) } // a failure before the fence concerns every member
	conn, err := d.db.Conn(ctx)
	if err != nil {
		all()
		return res, alone, fmt.Errorf("beginning batches of %d held partitions: %w", n, causeOr(ctx, err))
	}
	defer func() { _ = conn.Close() }()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		all()
		return res, alone, fmt.Errorf("beginning batches of %d held partitions: %w", n, causeOr(ctx, err))
	}
	defer func() { _ = tx.Rollback() }()
	if err := d.db.SetLocalTimeouts(ctx, tx); err != nil {
		all()
		return res, alone, fmt.Errorf("beginning batches of %d held partitions: %w", n, causeOr(ctx, err))
	}
	// Fence each member by its own claim, in key order; a member lost
	// there drops out with the fence's error, as a lone batch would.
	cps := make([]partition.Checkpoint, n)
	for k, i := range order {
		l := hs[i].lease.Lease
		cp, ferr := d.store.Fence(ctx, tx, d.worker.InstanceID, l)
		switch {
		case errors.Is(ferr, partition.ErrFenced):
			res[i] = heldResult{err: causeOr(ctx, ferr)}
			continue
		case ferr != nil:
			in = append(in, order[k:]...)
			return res, alone, causeOr(ctx, ferr)
		case cp.Position >= cp.Available:
			res[i] = heldResult{caughtUp: true}
			continue
		case d.wouldSplit(hs[i].lease.Key, cp):
			alone[i] = true
			continue
		}
		cps[i] = cp
		in = append(in, i)
	}
	if len(in) == 0 {
		return res, alone, nil
	}
	pending := make([]int64, len(in))
	for k, i := range in {
		pending[k] = cps[i].Available - cps[i].Position
	}
	limits := shareItems(pending, d.size.batchLimit(), d.size.groupLimit())
	tried := 0
	g := &Group{Owner: d.worker.InstanceID, Tx: tx, Conn: conn, Batches: make([]*Batch, len(in)),
		Prepare: d.db.Direct(), Held: true}
	spans := make([]trace.Span, len(in))
	items := make([]int64, len(in))
	caught := make([]bool, len(in))
	for k, i := range in {
		h := hs[i]
		l := h.lease.Lease
		_, bspan := tracer.Start(ctx, "baton.batch", d.leaseAttrs(l), trace.WithAttributes(
			attribute.Bool("baton.with_group", true)))
		spans[k] = bspan
		g.Batches[k] = &Batch{Kind: d.cfg.Kind, Lease: l, Owner: d.worker.InstanceID, Tx: tx, Conn: conn,
			Checkpoint: cps[i], Limit: limits[k], Partition: partition.PartitionOf(l.Key)}
		h.tried = limits[k]
		tried += limits[k]
	}
	defer func() {
		if err != nil && dberr.TooLong(err) {
			// Groups take fewer items from now on; each member goes on
			// alone, which halves its own batch if that is too long too.
			limit := d.size.groupTooLong(tried, d.cfg.Clock.Since(start))
			d.log.Info("batches of a group of held partitions too long for one transaction; each runs alone",
				"partitions", len(in), "items", tried, "group_limit", limit, "error", err)
		}
	}()
	defer func() {
		for k, bspan := range spans {
			if err != nil {
				endBatchSpan(bspan, 0, false, err)
				continue
			}
			endBatchSpan(bspan, items[k], caught[k], nil)
		}
	}()
	results, err := d.processGroup(ctx, gp, g)
	if err != nil {
		return res, alone, causeOr(ctx, err)
	}
	var release []partition.Lease
	for k, b := range g.Batches {
		r, cp := results[k], b.Checkpoint
		if r.Position <= cp.Position || r.Position > cp.Available {
			return res, alone, fmt.Errorf("processing %s: processor returned position %d outside (%d, %d]",
				b.Lease, r.Position, cp.Position, cp.Available)
		}
		spans[k].SetAttributes(attribute.Int64("baton.position", r.Position), attribute.Bool("baton.first_batch", false),
			attribute.Bool("baton.takeover", false))
		if err := d.store.Advance(trace.ContextWithSpan(ctx, spans[k]), tx, b.Lease, cp.Position, r.Position, r.State); err != nil {
			return res, alone, causeOr(ctx, err)
		}
		items[k], caught[k] = r.Position-cp.Position, r.Position >= cp.Available
		total += items[k]
		if caught[k] && d.releasesCaughtUp(b.Lease.Key) {
			release = append(release, b.Lease)
		}
	}
	released := map[string]bool{}
	if len(release) > 0 {
		// As a lone batch's release with its last batch (batch.go), for
		// every member caught up, in one statement.
		for _, k := range in {
			if slices.ContainsFunc(release, func(l partition.Lease) bool { return l.Key == hs[k].lease.Key }) {
				hs[k].lease.SetReleasing(true)
			}
		}
		defer func() {
			if err != nil {
				for _, k := range in {
					hs[k].lease.SetReleasing(false)
				}
			}
		}()
		rctx, rspan := tracer.Start(ctx, "baton.release", trace.WithAttributes(attribute.String("baton.reason", "caught_up"),
			attribute.Bool("baton.with_batch", true), attribute.Int("baton.partitions", len(release))))
		keys, rerr := d.store.WithDB(tx).ReleaseFor(rctx, d.worker.InstanceID, "caught_up", release)
		if rerr == nil && len(keys) != len(release) {
			rerr = fmt.Errorf("releasing %d partitions with their last batches, %d released: %w", len(release), len(keys), partition.ErrFenced)
		}
		endSpan(rspan, rerr)
		if rerr != nil {
			return res, alone, causeOr(ctx, rerr)
		}
		for _, l := range release {
			released[l.Key] = true
		}
	}
	watch := dbconn.WatchConn(conn.Conn)
	if cerr := tx.Commit(); cerr != nil {
		if ctx.Err() != nil || !dberr.UnknownOutcome(cerr) {
			return res, alone, fmt.Errorf("committing batches of %d held partitions: %w", len(in), causeOr(ctx, cerr))
		}
		// The commit may have applied with its reply lost: re-read each
		// member, which answers for itself as a lone batch's re-read.
		for k, i := range in {
			l := g.Batches[k].Lease
			ok, rerr := d.resolveCommit(l, results[k].Position, released[l.Key])
			if rerr != nil || !ok {
				hs[i].lease.SetReleasing(false)
				res[i] = heldResult{err: fmt.Errorf("committing batch of %s (outcome re-read: %v): %w", l, rerr, cerr)}
				items[k] = 0
				continue
			}
			d.log.Info("commit outcome was unknown; re-read shows it applied", d.cfg.KeyAttr, l.Key, "version", l.Version)
		}
	}
	elapsed := d.cfg.Clock.Since(start)
	var largest int64
	for k, i := range in {
		if res[i].err != nil {
			continue
		}
		l := g.Batches[k].Lease
		res[i] = heldResult{items: items[k], caughtUp: caught[k], released: released[l.Key]}
		if watch.NotReplicated() {
			d.reportNotReplicated(l, results[k].Position)
		}
		hs[i].pending.Store(max(0, cps[i].Available-results[k].Position))
		largest = max(largest, items[k])
		d.reportCheckpoint(l, items[k], results[k].Position, elapsed)
	}
	d.size.groupTook(int(total), elapsed)
	d.size.batchTook(int(largest), elapsed)
	return res, alone, nil
}

// wouldSplit reports whether a batch of key at cp would split its
// partition (split.go), which it then does alone.
func (d *Distributor) wouldSplit(key string, cp partition.Checkpoint) bool {
	_, ok := d.proc.(Splitter)
	return ok && partition.PartitionOf(key) == key && cp.Available-cp.Position > 2*d.cfg.SegmentRecords
}
