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

// txnStatements are a transaction's fence and record steps, which run
// their statements through t.store.
type txnStatements interface {
	// fence fences t's members, marks each (in, or out with its outcome,
	// or alone) and returns those in, in the order of their locks. An
	// error fails the whole transaction.
	fence(ctx context.Context, t *txn) ([]*member, error)
	// record writes the checkpoints of t.in (processed, in range), with
	// the claims of unowned members, and releases those marked release,
	// setting released.
	record(ctx context.Context, t *txn) error
}

// txn is one transaction of the pipeline and, once run, its outcome.
type txn struct {
	stmts txnStatements
	// store runs the protocol's statements on the transaction, once
	// begun.
	store taskstore.Txn
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
	// spanName names a group's span; spanFirst starts it (or a lone
	// member's batch span) before the fence rather than after.
	spanName  string
	spanFirst bool
	// resolveEach: an unknown commit is re-read member by member, each
	// answering for itself (held partitions); otherwise the first member
	// answers for all (claims: their rows moved together).
	resolveEach bool
	// batchBound: a group also counts as one batch of its largest
	// member's items for the batch bound.
	batchBound bool
	// keep, with limitKeep (a claim with riders, riders.go): the most
	// members held on after the commit; the others are released with it,
	// caught up or not.
	keep      int
	limitKeep bool

	in      []*member     // the members fenced, in the order of their locks
	span    trace.Span    // a group's
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
	part  string              // the partition whose items it holds (its key, or a segment's partition)
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
	noRoom   bool // released not caught up: beyond the room of its claim (riders.go)
	released bool
	// committed: its batch committed; err: its own failure (fence,
	// release, outcome re-read) when the transaction's is nil.
	committed bool
	err       error
}

// newMember is a member for lease l, whose key it parses once.
func newMember(l partition.Lease) *member {
	return &member{lease: l, part: partition.PartitionOf(l.Key)}
}

// segment reports whether m is a segment of a partition.
func (m *member) segment() bool { return m.part != m.lease.Key }

// first reports whether m's batch is the first of its claim.
func (m *member) first() bool { return m.h == nil || !m.h.started }

// runTxn runs t: begin, fence, process, check, record (claim, advance,
// release), commit, resolve an unknown outcome. It returns the
// transaction's failure, which concerns every member not out; each
// member's own outcome is in t.members.
func (d *Distributor) runTxn(t *txn) (err error) {
	ctx, stop := d.txnContext(t)
	defer stop()
	start := d.startClock(t)
	defer d.stopClock(t, start)
	defer func() { endSpans(t, err) }()
	if t.spanFirst {
		ctx = d.openSpan(ctx, t)
	}
	conn, tx, err := d.begin(ctx, t)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(); _ = conn.Close() }()
	if t.in, err = t.stmts.fence(ctx, t); err != nil || len(t.in) == 0 {
		return err
	}
	if !t.spanFirst {
		ctx = d.openSpan(ctx, t) // a candidate lost at its fence was no batch
	}
	defer func() {
		if err != nil {
			stopReleasing(t.in)
		}
	}()
	if err := d.processAll(ctx, t, d.batches(ctx, t, conn, tx)); err != nil {
		return err
	}
	if err := d.check(t); err != nil {
		return err
	}
	if err := t.stmts.record(ctx, t); err != nil {
		return err
	}
	return d.commit(ctx, t, conn, tx, start)
}

// txnContext is t's context, which ends with the transaction's deadline,
// with the worker's abandoning its work, with a lone held member's lease
// and with any lease of a group's (that member's fence would fail the
// commit anyway). stop releases it.
func (d *Distributor) txnContext(t *txn) (ctx context.Context, stop func()) {
	ctx, cancelDeadline := d.base, context.CancelFunc(func() {})
	if t.lone && t.members[0].h != nil {
		ctx = t.members[0].h.lease.Context()
	}
	if t.deadline > 0 {
		ctx, cancelDeadline = context.WithTimeoutCause(ctx, t.deadline, context.DeadlineExceeded)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	stops := []func() bool{context.AfterFunc(d.abandon, func() { cancel(context.Cause(d.abandon)) })}
	for _, m := range t.members {
		if m.h == nil || t.lone {
			continue
		}
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
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel(nil)
		cancelDeadline()
	}
}

// startClock starts timing t: no items tried yet.
func (d *Distributor) startClock(t *txn) time.Time {
	for _, m := range t.members {
		if m.h != nil {
			m.h.tried = 0
		}
	}
	return d.cfg.Clock.Now()
}

// stopClock records how long t took, to its commit or its failure.
func (d *Distributor) stopClock(t *txn, start time.Time) {
	t.elapsed = d.cfg.Clock.Since(start)
	for _, m := range t.members {
		if m.h != nil {
			m.h.took = t.elapsed
		}
	}
}

// openSpan starts a group's span, or a lone member's batch span, which
// stands in for the group's. Each member of a group gets its own
// "baton.batch" span under the group's (batches).
func (d *Distributor) openSpan(ctx context.Context, t *txn) context.Context {
	if !t.lone {
		ctx, t.span = tracer.Start(ctx, t.spanName, trace.WithAttributes(
			attribute.String("baton.worker", d.worker.InstanceID), attribute.Int("baton.group", len(t.members))))
		return ctx
	}
	m := t.members[0]
	ctx, m.span = tracer.Start(ctx, "baton.batch", d.leaseAttrs(m.lease), trace.WithAttributes(batchAttrs(t, m)...))
	m.ctx = ctx
	return ctx
}

// endSpans ends the members' batch spans and the group's.
func endSpans(t *txn, err error) {
	var total int64
	for _, m := range t.members {
		total += m.items
		switch {
		case m.span == nil:
		case err != nil:
			endBatchSpan(m.span, 0, false, err)
		default:
			endBatchSpan(m.span, m.items, m.caughtUp, m.err)
		}
	}
	if t.span != nil {
		t.span.SetAttributes(attribute.Int64("baton.items", total), attribute.Int("baton.members", len(t.in)))
		endSpan(t.span, err)
	}
}

// begin takes a connection of its own, so that the processor can reach
// the driver's connection inside the transaction (Batch.CopyFrom), begins,
// sets the local timeouts and makes t's statements on the transaction.
func (d *Distributor) begin(ctx context.Context, t *txn) (bun.Conn, bun.Tx, error) {
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return conn, bun.Tx{}, fmt.Errorf("beginning %s: %w", t.what, causeOr(ctx, err))
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err == nil {
		err = d.db.SetLocalTimeouts(ctx, tx)
		if err != nil {
			_ = tx.Rollback()
		}
	}
	if err != nil {
		_ = conn.Close()
		return conn, tx, fmt.Errorf("beginning %s: %w", t.what, causeOr(ctx, err))
	}
	t.store = d.store.InTx(tx, d.worker.InstanceID)
	return conn, tx, nil
}

// stopReleasing tells the held members of a failed transaction that their
// release did not happen.
func stopReleasing(in []*member) {
	for _, m := range in {
		if m.h != nil {
			m.h.lease.SetReleasing(false)
		}
	}
}

// batches makes the fenced members' batches, in one Group: a lone one
// takes at most the batch bound, a group's share the group bound, each
// member at most the member bound (sizing.go).
func (d *Distributor) batches(ctx context.Context, t *txn, conn bun.Conn, tx bun.Tx) *Group {
	var limits []int
	if t.lone {
		limits = []int{int(min(int64(d.size.batchLimit()), t.in[0].cp.Available-t.in[0].cp.Position))}
	} else {
		pending := make([]int64, len(t.in))
		for k, m := range t.in {
			pending[k] = m.cp.Available - m.cp.Position
		}
		limits = shareItems(pending, d.size.memberLimit(d.cfg.ClaimGroup), d.size.groupLimit())
	}
	tc := &txConn{conn: conn, prepare: d.db.Direct()}
	g := &Group{Owner: d.worker.InstanceID, Tx: tx, Batches: make([]*Batch, len(t.in)), Owned: t.in[0].h != nil, conn: tc}
	for k, m := range t.in {
		if !t.lone {
			m.ctx, m.span = tracer.Start(ctx, "baton.batch", d.leaseAttrs(m.lease), trace.WithAttributes(batchAttrs(t, m)...))
		}
		if m.first() {
			linkPrevious(m.span, m.cp.Traceparent)
		}
		m.b = &Batch{Kind: d.cfg.Kind, Lease: m.lease, Owner: d.worker.InstanceID, Tx: tx,
			Checkpoint: m.cp, Limit: limits[k], Partition: m.part, conn: tc}
		g.Batches[k] = m.b
		if m.h != nil {
			m.h.tried = limits[k]
		}
		t.tried += limits[k]
	}
	return g
}

// processAll hands the members' batches to the processor: a group's to
// ProcessGroup, a lone one to Process, unless it is a held partition's
// that splits instead.
func (d *Distributor) processAll(ctx context.Context, t *txn, g *Group) (err error) {
	if !t.lone {
		results, err := d.processGroup(ctx, t.group, g)
		if err != nil {
			return causeOr(ctx, err)
		}
		for k, m := range t.in {
			m.res = results[k]
		}
		return nil
	}
	m := t.in[0]
	if m.h != nil {
		m.res, m.segments, err = d.split(ctx, m.b)
	}
	if err == nil && m.segments == 0 {
		m.res, err = d.process(ctx, m.b)
	}
	switch {
	case err == nil:
		return nil
	case m.h != nil:
		return d.movedOr(ctx, m.lease, m.cp.Position, causeOr(ctx, err))
	}
	return causeOr(ctx, err)
}

// check checks every member's new position against its range, and notes
// its items, whether it caught up and whether it is released with the
// commit.
func (d *Distributor) check(t *txn) error {
	for _, m := range t.in {
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
		m.release = m.caughtUp && d.releasesCaughtUp(m.segment())
	}
	if t.limitKeep {
		kept := 0
		for _, m := range t.in {
			switch {
			case m.release:
			case kept < t.keep:
				kept++
			default:
				m.release, m.noRoom = true, true
			}
		}
	}
	return nil
}

// commit commits t once, resolves an outcome it could not learn, and
// marks the members committed.
func (d *Distributor) commit(ctx context.Context, t *txn, conn bun.Conn, tx bun.Tx, start time.Time) error {
	watch := pgxconn.WatchConn(conn.Conn)
	if cerr := tx.Commit(); cerr != nil {
		if ctx.Err() != nil || !dberr.UnknownOutcome(cerr) {
			return fmt.Errorf("committing %s: %w", t.what, causeOr(ctx, cerr))
		}
		if err := d.resolveUnknown(t, cerr); err != nil {
			return err
		}
	}
	d.committed(t, watch, d.cfg.Clock.Since(start))
	return nil
}

// resolveUnknown re-reads the members after a commit whose reply was lost
// (it may have applied): held partitions member by member, each answering
// for itself (one not applied, or not read, fails alone); claims by their
// first member, which answers for all (their rows moved together).
func (d *Distributor) resolveUnknown(t *txn, cerr error) error {
	for _, m := range t.in {
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
			"version", m.lease.Version, "partitions", len(t.in))
		if !t.resolveEach {
			return nil
		}
	}
	return nil
}

// committed marks the members whose batches committed, reports those the
// synchronous standby did not confirm, and feeds the sizer t's duration.
func (d *Distributor) committed(t *txn, watch pgxconn.CommitWatch, elapsed time.Duration) {
	var total, largest int64
	for _, m := range t.in {
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
	case t.lone && t.in[0].committed && t.in[0].segments == 0:
		d.size.batchTook(int(t.in[0].items), elapsed)
	case !t.lone:
		d.size.groupTook(int(total), elapsed)
		if t.batchBound {
			d.size.batchTook(int(largest), elapsed)
		}
	}
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
	v, pos, err := d.reread(l.Key, 3)
	switch {
	case err != nil:
		return false, err
	case released && v == l.Version+1:
		return pos == position, nil
	case v != l.Version:
		return false, partition.ErrFenced
	}
	return pos == position, nil
}

// reread reads key's version and position outside any transaction, within
// StaleAfter/2, up to attempts times a quarter of a heartbeat apart while
// the reads fail: the one step through which the pipeline re-reads
// progress (resolveCommit, movedOr).
func (d *Distributor) reread(key string, attempts int) (version, position int64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.StaleAfter/2)
	defer cancel()
	for attempt := 1; ; attempt++ {
		version, position, err = d.admin.Progress(ctx, key)
		if err == nil || attempt >= attempts {
			return version, position, err
		}
		select {
		case <-ctx.Done():
			return version, position, err
		case <-d.cfg.Clock.After(d.cfg.Heartbeat / 4):
		}
	}
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
