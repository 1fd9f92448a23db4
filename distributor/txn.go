package distributor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/batonhq/baton/internal/dberr"
	"github.com/batonhq/baton/internal/pgxconn"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
	"github.com/uptrace/bun"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// The fenced transaction. Every batch the worker commits goes through one
// pipeline, runTxn: a held partition's lone batch, the batches of several
// held partitions (Held groups), an unowned partition's claim with its
// first batch, and several of those (Claim in groups). A lone batch is a
// group of one, and a claim is the same transaction whose record step
// claims as it advances. The pipeline gets a connection, begins, sets the
// local timeouts, fences the members (in partition_key order: the order of
// their locks), hands their batches to the processor (Process for one,
// ProcessGroup for several), checks every member's range, records every
// checkpoint (and claim), releases the members that caught up where the
// mode says so, commits once, reports a commit the synchronous standby did
// not confirm, and re-reads a commit whose outcome it could not learn.
//
// What differs between the four is data: txnStatements (the fence and
// record statements of held partitions or of claims), the txn's fields
// (its deadline, its spans, how an unknown outcome is resolved, which
// bounds its duration feeds), and what the caller does with the members'
// outcomes afterwards (batch and heldGroup for held partitions, runClaim
// for claims).

// txnStatements are a transaction's fence and record steps.
type txnStatements interface {
	// fence fences t's members in tx, marks each (in, or out with its
	// outcome, or alone) and returns those in, in the order of their
	// locks. An error fails the whole transaction.
	fence(ctx context.Context, tx bun.Tx, t *txn) ([]*member, error)
	// record writes the checkpoints of in (processed, in range), with
	// the claims of unowned members, and releases those marked release,
	// setting released.
	record(ctx context.Context, tx bun.Tx, t *txn, in []*member) error
}

// txn is one transaction of the pipeline and, once run, its outcome.
type txn struct {
	stmts txnStatements
	// what names the transaction in errors.
	what string
	// members are its partitions, in the caller's order (claims: the
	// candidates fenced, once fenced).
	members []*member
	// lone: one member, processed by Process (a split for a held
	// partition); otherwise group processes them all, and they share the
	// group's bound of items.
	lone  bool
	group GroupProcessor
	// deadline bounds the transaction (claims: nothing renews their
	// lease before they commit); held partitions' end with their leases.
	deadline time.Duration
	// groupSpan names a group's span; spanFirst starts it (or a lone
	// member's batch span) before the fence rather than after.
	groupSpan string
	spanFirst bool
	// resolveEach: an unknown commit is re-read member by member, each
	// answering for itself (held partitions); otherwise the first member
	// answers for all (claims: their rows moved together).
	resolveEach bool
	// batchBound: a group also counts as one batch of its largest
	// member's items for the batch bound.
	batchBound bool

	tried   int           // items the members' batches were allowed in all
	elapsed time.Duration // to the commit or the failure
	sent    time.Time     // when a claim's record statement was sent
	unknown bool          // the commit's outcome could not be learnt
}

// memberState is where a member stands in its transaction.
type memberState int

const (
	memberPending memberState = iota // not fenced (yet)
	memberIn                         // fenced, its batch in the transaction
	memberOut                        // dropped at the fence, with its outcome (err or caughtUp)
	memberAlone                      // to run its batch alone (it would split)
)

// member is one partition of a transaction.
type member struct {
	lease partition.Lease     // the claim its batch writes under
	h     *held               // a held partition's; nil for a claim
	cand  taskstore.Candidate // a claim's candidate

	state    memberState
	cp       partition.Checkpoint
	b        *Batch
	ctx      context.Context // its batch span's
	span     trace.Span
	res      Result
	segments int   // a lone batch's split
	items    int64 // processed (0 for a split)
	caughtUp bool
	release  bool // to be released with the commit
	released bool
	// committed: its batch committed; err: its own failure (fence,
	// release, outcome re-read) when the transaction's is nil.
	committed bool
	err       error
}

// first reports whether m's batch is the first of its claim.
func (m *member) first() bool { return m.h == nil || !m.h.started }

// runTxn runs t: begin, fence, process, check, record (claim), release,
// commit, resolve. It returns the transaction's failure, which concerns
// every member not out; each member's own outcome is in t.members.
func (d *Distributor) runTxn(t *txn) (err error) {
	parent := d.base
	if t.lone && t.members[0].h != nil {
		parent = t.members[0].h.lease.Context()
	}
	ctx := parent
	if t.deadline > 0 {
		var cancelDeadline context.CancelFunc
		ctx, cancelDeadline = context.WithTimeoutCause(ctx, t.deadline, context.DeadlineExceeded)
		defer cancelDeadline()
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stops := []func() bool{context.AfterFunc(d.abandon, func() { cancel(context.Cause(d.abandon)) })}
	for _, m := range t.members {
		if m.h == nil || t.lone {
			continue
		}
		// A group ends with any member's lease: that member's fence
		// would fail the commit anyway.
		lctx, key := m.h.lease.Context(), m.lease.Key
		ended := func() { cancel(fmt.Errorf("lease of %s ended: %w", key, context.Cause(lctx))) }
		stops = append(stops, context.AfterFunc(lctx, ended))
		if lctx.Err() != nil {
			// AfterFunc runs ended in a goroutine of its own, which a
			// quick group could outrun to its commit: a lease already
			// ended ends the group before it begins.
			ended()
		}
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	start := d.cfg.Clock.Now()
	for _, m := range t.members {
		if m.h != nil {
			m.h.tried = 0
		}
	}
	defer func() {
		t.elapsed = d.cfg.Clock.Since(start)
		for _, m := range t.members {
			if m.h != nil {
				m.h.took = t.elapsed
			}
		}
	}()

	// Spans: a "baton.batch" per member (fence to commit), under the
	// group's span; a lone member's batch span stands in for the group's.
	var in []*member
	var groupSpan trace.Span
	openSpan := func() {
		if !t.lone {
			ctx, groupSpan = tracer.Start(ctx, t.groupSpan, trace.WithAttributes(
				attribute.String("baton.worker", d.worker.InstanceID), attribute.Int("baton.group", len(t.members))))
			return
		}
		m := t.members[0]
		ctx, m.span = tracer.Start(ctx, "baton.batch", d.leaseAttrs(m.lease), trace.WithAttributes(batchAttrs(t, m)...))
		m.ctx = ctx
	}
	defer func() {
		var total int64
		for _, m := range t.members {
			total += m.items
			if m.span == nil {
				continue
			}
			switch {
			case err != nil:
				endBatchSpan(m.span, 0, false, err)
			default:
				endBatchSpan(m.span, m.items, m.caughtUp, m.err)
			}
		}
		if groupSpan != nil {
			groupSpan.SetAttributes(attribute.Int64("baton.items", total), attribute.Int("baton.members", len(in)))
			endSpan(groupSpan, err)
		}
	}()
	if t.spanFirst {
		openSpan()
	}

	// A connection of its own, so that the processor can reach the
	// driver's connection inside the transaction (Batch.CopyFrom).
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("beginning %s: %w", t.what, causeOr(ctx, err))
	}
	defer func() { _ = conn.Close() }()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("beginning %s: %w", t.what, causeOr(ctx, err))
	}
	defer func() { _ = tx.Rollback() }()
	if err := d.db.SetLocalTimeouts(ctx, tx); err != nil {
		return fmt.Errorf("beginning %s: %w", t.what, causeOr(ctx, err))
	}
	if in, err = t.stmts.fence(ctx, tx, t); err != nil || len(in) == 0 {
		return err
	}
	if !t.spanFirst {
		openSpan() // a candidate lost at its fence was no batch
	}
	defer func() {
		if err != nil {
			for _, m := range in {
				if m.h != nil {
					m.h.lease.SetReleasing(false)
				}
			}
		}
	}()

	// The members' batches: a lone one takes at most the batch bound, a
	// group's share the group bound.
	var limits []int
	if t.lone {
		limits = []int{int(min(int64(d.size.batchLimit()), in[0].cp.Available-in[0].cp.Position))}
	} else {
		pending := make([]int64, len(in))
		for k, m := range in {
			pending[k] = m.cp.Available - m.cp.Position
		}
		limits = shareItems(pending, d.size.batchLimit(), d.size.groupLimit())
	}
	tc := &txConn{conn: conn, prepare: d.db.Direct()}
	g := &Group{Owner: d.worker.InstanceID, Tx: tx, Batches: make([]*Batch, len(in)), Owned: in[0].h != nil, conn: tc}
	for k, m := range in {
		if !t.lone {
			m.ctx, m.span = tracer.Start(ctx, "baton.batch", d.leaseAttrs(m.lease), trace.WithAttributes(batchAttrs(t, m)...))
		}
		if m.first() {
			linkPrevious(m.span, m.cp.Traceparent)
		}
		m.b = &Batch{Kind: d.cfg.Kind, Lease: m.lease, Owner: d.worker.InstanceID, Tx: tx,
			Checkpoint: m.cp, Limit: limits[k], Partition: partition.PartitionOf(m.lease.Key), conn: tc}
		g.Batches[k] = m.b
		if m.h != nil {
			m.h.tried = limits[k]
		}
		t.tried += limits[k]
	}

	// Process: a lone held partition's batch may split it instead.
	if t.lone {
		m := in[0]
		if m.h != nil {
			m.res, m.segments, err = d.split(ctx, m.b)
		}
		if err == nil && m.segments == 0 {
			m.res, err = d.process(ctx, m.b)
		}
		if err != nil && m.h != nil {
			return d.movedOr(ctx, m.lease, m.cp.Position, causeOr(ctx, err))
		}
	} else {
		var results []Result
		results, err = d.processGroup(ctx, t.group, g)
		for k, m := range in {
			if err == nil {
				m.res = results[k]
			}
		}
	}
	if err != nil {
		return causeOr(ctx, err)
	}
	for _, m := range in {
		cp, pos := m.cp, m.res.Position
		if pos <= cp.Position || pos > cp.Available {
			return fmt.Errorf("processing %s: processor returned position %d outside (%d, %d]",
				m.lease, pos, cp.Position, cp.Available)
		}
		m.span.SetAttributes(attribute.Int64("baton.position", pos), attribute.Bool("baton.first_batch", m.first()),
			attribute.Bool("baton.takeover", m.h != nil && m.h.takeover))
		if m.segments == 0 {
			m.items = pos - cp.Position
		}
		m.caughtUp = pos >= cp.Available
		m.release = m.caughtUp && d.releasesCaughtUp(m.lease.Key)
	}
	if err := t.stmts.record(ctx, tx, t, in); err != nil {
		return err
	}

	watch := pgxconn.WatchConn(conn.Conn)
	if cerr := tx.Commit(); cerr != nil {
		if ctx.Err() != nil || !dberr.UnknownOutcome(cerr) {
			return fmt.Errorf("committing %s: %w", t.what, causeOr(ctx, cerr))
		}
		// The commit may have applied with its reply lost: re-read.
		for _, m := range in {
			ok, rerr := d.resolveCommit(m.lease, m.res.Position, m.released)
			switch {
			case t.resolveEach && (rerr != nil || !ok):
				m.h.lease.SetReleasing(false)
				m.err = fmt.Errorf("committing batch of %s (outcome re-read: %v): %w", m.lease, rerr, cerr)
				continue
			case rerr != nil && !errors.Is(rerr, partition.ErrFenced):
				t.unknown = true
				return fmt.Errorf("committing %s (outcome re-read: %v): %w", t.what, rerr, cerr)
			case !ok:
				// Not applied: rolled back.
				return fmt.Errorf("committing %s (re-read: not applied): %w", t.what, cerr)
			}
			d.log.Info("commit outcome was unknown; re-read shows it applied", d.cfg.KeyAttr, m.lease.Key,
				"version", m.lease.Version, "partitions", len(in))
			if !t.resolveEach {
				break // one transaction: the first member tells for all
			}
		}
	}
	elapsed := d.cfg.Clock.Since(start)
	var total, largest int64
	for _, m := range in {
		total += m.items
		if m.err != nil {
			continue
		}
		m.committed = true
		largest = max(largest, m.items)
		if watch.NotReplicated() {
			d.reportNotReplicated(m.lease, m.res.Position)
		}
	}
	switch {
	case t.lone && in[0].committed && in[0].segments == 0:
		d.size.batchTook(int(in[0].items), elapsed)
	case !t.lone:
		d.size.groupTook(int(total), elapsed)
		if t.batchBound {
			d.size.batchTook(int(largest), elapsed)
		}
	}
	return nil
}

// batchAttrs are a member's batch span's own attributes: a claim's start
// position, or a held group's membership.
func batchAttrs(t *txn, m *member) []attribute.KeyValue {
	switch {
	case m.h == nil:
		return []attribute.KeyValue{attribute.Int64("baton.position", m.cp.Position), attribute.Bool("baton.with_claim", true)}
	case !t.lone:
		return []attribute.KeyValue{attribute.Bool("baton.with_group", true)}
	}
	return nil
}

// resolveCommit re-reads a partition after a commit whose outcome is
// unknown: it applied if the checkpoint is at position under the claim's
// version, or, for a batch that also released the partition, under the
// version its release made (the next one: nobody else can have claimed it
// while the lease was live).
func (d *Distributor) resolveCommit(l partition.Lease, position int64, released bool) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.StaleAfter/2)
	defer cancel()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		v, pos, err := d.admin.Progress(ctx, l.Key)
		if err == nil {
			switch {
			case released && v == l.Version+1:
				return pos == position, nil
			case v != l.Version:
				return false, partition.ErrFenced
			}
			return pos == position, nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return false, lastErr
		case <-d.cfg.Clock.After(d.cfg.Heartbeat / 4):
		}
	}
	return false, lastErr
}

// process calls the processor on a lone batch.
func (d *Distributor) process(ctx context.Context, b *Batch) (res Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("processor panicked on %s: %v", b.Lease, r)
		}
	}()
	res, err = d.proc.Process(ctx, b)
	if err != nil {
		err = fmt.Errorf("processing %s: %w", b.Lease, err)
	}
	return res, err
}

// processGroup calls the processor's group, which must return one result
// per member.
func (d *Distributor) processGroup(ctx context.Context, gp GroupProcessor, g *Group) (res []Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("processor panicked on a group of %d partitions (%s, …): %v", len(g.Batches), g.Batches[0].Lease, r)
		}
	}()
	res, err = gp.ProcessGroup(ctx, g)
	if err != nil {
		return nil, fmt.Errorf("processing a group of %d partitions (%s, …): %w", len(g.Batches), g.Batches[0].Lease, err)
	}
	if len(res) != len(g.Batches) {
		return nil, fmt.Errorf("processing a group of %d partitions (%s, …): processor returned %d results",
			len(g.Batches), g.Batches[0].Lease, len(res))
	}
	return res, nil
}

// causeOr adds ctx's cause to err, unless err already carries it.
func causeOr(ctx context.Context, err error) error {
	if c := context.Cause(ctx); c != nil && !errors.Is(err, c) {
		return fmt.Errorf("%w (%w)", err, c)
	}
	return err
}
