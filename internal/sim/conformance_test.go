package sim

import (
	"context"
	"errors"
	"fmt"
	"github.com/batonhq/baton/internal/leaseinfo"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/storetest"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
)

// The model store is held to the contract taskstore.Store passes on
// PostgreSQL (see TestStoreContract in package partition): the same cases,
// through the same statements the simulated workers send.
func TestModelStoreContract(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		h := newModelHarness(Config{AdvanceCAS: true})
		t.Cleanup(func() {
			if v := h.s.viol; v != nil {
				t.Errorf("the model's invariant checker: %v", v)
			}
		})
		return h
	})
}

// A model that breaks the protocol does not pass the contract: the suite
// catches the drift.
func TestBrokenModelStoresFailTheContract(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // a case that must fail
	}{
		{"claim ignores the version", Config{AdvanceCAS: true, Mutation: MutClaimNoCAS}, "Claim/CompareAndSetOnVersion"},
		{"no fence", Config{AdvanceCAS: true, Mutation: MutNoFence}, "Fence/OnlyTheCurrentOwner"},
		{"no fence on a claim with its first batch", Config{AdvanceCAS: true, Mutation: MutNoFence}, "ClaimWithBatch/FenceExcludesOtherClaims"},
		{"checkpoint update compares only the version", Config{}, "Advance/CheckpointMovedSinceTheFence"},
		{"rewind looks for segments before it waits", Config{AdvanceCAS: true, Mutation: MutRewindStaleSegments}, "Rewind/FindsSegmentsSplitWhileItWaits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			failed := storetest.Failures(t, func(*testing.T) storetest.Harness { return newModelHarness(tc.cfg) })
			t.Logf("failing cases: %v", failed)
			if _, ok := failed[tc.want]; !ok {
				t.Errorf("%s passes %s; failing cases: %v", tc.name, tc.want, failed)
			}
		})
	}
}

// modelHarness drives the model store statement by statement: each call
// runs the event loop until the reply arrives.
type modelHarness struct {
	s      *sim
	keys   map[string]int // partitions' rows by key
	names  map[int]string // partitions' keys by row
	owners map[string]int
}

func newModelHarness(cfg Config) *modelHarness {
	cfg.Workers, cfg.Partitions = 1, 1
	cfg.StaleAfter = storetest.TTL
	cfg.Heartbeat = storetest.HeartbeatInterval
	cfg.SafetyMargin = storetest.SafetyMargin
	cfg.Backoff, cfg.MaxBackoff = storetest.Backoff, storetest.MaxBackoff
	cfg.setDefaults()
	s := &sim{cfg: cfg, rng: rand.New(rand.NewPCG(uint64(cfg.Seed), 0)), latStart: map[int]latencyStart{}}
	s.st = &store{s: s, workerRows: map[int]*workerRow{}}
	return &modelHarness{s: s, keys: map[string]int{}, names: map[int]string{}, owners: map[string]int{}}
}

func (h *modelHarness) owner(name string) int {
	id, ok := h.owners[name]
	if !ok {
		id = len(h.owners) + 1
		h.owners[name] = id
	}
	return id
}

// name is the key of row k: a partition's, or a segment's
// (partition.SegmentKey).
func (h *modelHarness) name(k int) string {
	if r := h.s.st.rows[k]; r.segment {
		return partition.SegmentKey(h.names[r.parent], r.start)
	}
	return h.names[k]
}

// key is the row of a partition's or a segment's key.
func (h *modelHarness) key(name string) (int, bool) {
	if k, ok := h.keys[name]; ok {
		return k, true
	}
	p, start, ok := partition.ParseSegmentKey(name)
	if !ok {
		return 0, false
	}
	k, ok := h.keys[p]
	if !ok {
		return 0, false
	}
	r := h.s.st.segKeys[segKey{k, start}]
	if r == nil || !r.visible() {
		return 0, false
	}
	return r.key, true
}

func (h *modelHarness) lease(l partition.Lease) (leaseID, bool) {
	k, ok := h.key(l.Key)
	return leaseID{k, l.Version}, ok
}

func (h *modelHarness) leases(ls []partition.Lease) []leaseID {
	var out []leaseID
	for _, l := range ls {
		if id, ok := h.lease(l); ok {
			out = append(out, id)
		}
	}
	return out
}

func (h *modelHarness) plain(id leaseID) partition.Lease {
	return partition.Lease{Key: h.name(id.key), Version: id.version}
}

// call sends req on c and runs the simulation until its reply.
func (h *modelHarness) call(c *conn, req *request) response {
	var got *response
	c.internal = func(r response) { got = &r }
	h.s.st.arrive(c, req)
	for got == nil && len(h.s.q) > 0 {
		e := h.s.q.pop()
		h.s.now = e.at
		h.s.events++
		e.fn()
	}
	if got == nil {
		return response{err: errNet}
	}
	return *got
}

// do runs one autocommit statement on a connection of its own.
func (h *modelHarness) do(req *request) response {
	c := h.s.newConn(nil)
	r := h.call(c, req)
	h.s.st.arrive(c, &request{kind: reqClose})
	return r
}

func asError(e errKind) error {
	switch e {
	case errNone:
		return nil
	case errFenced:
		return partition.ErrFenced
	case errCheckpointMoved:
		return partition.ErrCheckpointMoved
	case errClaimLost:
		return taskstore.ErrClaimLost
	case errNotFound:
		return partition.ErrNotFound
	}
	return fmt.Errorf("model store: %s", e)
}

func (h *modelHarness) AddPartition(key string, available int64) {
	k := len(h.s.st.rows)
	h.keys[key], h.names[k] = k, key
	h.s.st.rows = append(h.s.st.rows, &row{key: k, leaseExp: negInf, available: available})
}

func (h *modelHarness) Produce(key string, n int64) {
	h.do(&request{kind: reqProduce, key: h.keys[key], n: n})
}

func (h *modelHarness) ExpireLease(key string) {
	k, ok := h.key(key)
	if !ok {
		return
	}
	if r := h.s.st.rows[k]; r.leaseExp > h.s.now && r.leaseExp != posInf {
		r.leaseExp = h.s.now - time.Millisecond
	}
}

func (h *modelHarness) Pause(key string) {
	if h.s.st.paused == nil {
		h.s.st.paused = map[int]bool{}
	}
	h.s.st.paused[h.keys[key]] = true
}

func (h *modelHarness) Resume(key string) { delete(h.s.st.paused, h.keys[key]) }

func (h *modelHarness) AgeLease(key string, left time.Duration) {
	if r := h.s.st.rows[h.keys[key]]; r.leaseExp > h.s.now && r.leaseExp != posInf {
		r.leaseExp = h.s.now + left
	}
}

func (h *modelHarness) ExpireWorker(owner string) {
	if wr := h.s.st.workerRows[h.owner(owner)]; wr != nil {
		wr.expires = h.s.now - time.Millisecond
	}
}

func (h *modelHarness) candidates(kind reqKind, limit int) ([]taskstore.Candidate, error) {
	r := h.do(&request{kind: kind, limit: limit})
	var out []taskstore.Candidate
	for _, c := range r.cands {
		out = append(out, taskstore.Candidate{Key: h.name(c.key), Version: c.version, Owned: c.owned})
	}
	return out, asError(r.err)
}

func (h *modelHarness) Candidates(_ context.Context, limit int) ([]taskstore.Candidate, error) {
	return h.candidates(reqCandidates, limit)
}

func (h *modelHarness) StaleCandidates(_ context.Context, limit int) ([]taskstore.Candidate, error) {
	return h.candidates(reqStaleCandidates, limit)
}

func (h *modelHarness) Claim(_ context.Context, owner string, cands []taskstore.Candidate) ([]taskstore.Claimed, error) {
	var cs []candidate
	for _, c := range cands {
		if k, ok := h.key(c.Key); ok {
			cs = append(cs, candidate{leaseID{k, c.Version}, c.Owned})
		}
	}
	r := h.do(&request{kind: reqClaim, owner: h.owner(owner), cands: cs})
	var out []taskstore.Claimed
	for _, c := range r.won {
		out = append(out, taskstore.Claimed{Lease: h.plain(c.leaseID), Takeover: c.takeover, Position: c.position, Available: c.available})
	}
	return out, asError(r.err)
}

func (h *modelHarness) HeartbeatBelow(_ context.Context, owner string, wanted int, leases []partition.Lease) ([]leaseinfo.Renewal, error) {
	r := h.do(&request{kind: reqHeartbeat, owner: h.owner(owner), leases: h.leases(leases), wanted: wanted, renewBelow: storetest.RenewBelow})
	var out []leaseinfo.Renewal
	for _, x := range r.renewals {
		out = append(out, leaseinfo.Renewal{Lease: h.plain(x.leaseID), Available: x.available, Position: x.position,
			Fresh: x.fresh, Remaining: x.remaining, Paused: x.paused})
	}
	return out, asError(r.err)
}

func (h *modelHarness) Inspect(_ context.Context, owner string, leases []partition.Lease) ([]leaseinfo.Owned, error) {
	r := h.do(&request{kind: reqInspect, owner: h.owner(owner), leases: h.leases(leases)})
	var out []leaseinfo.Owned
	for _, x := range r.held {
		out = append(out, leaseinfo.Owned{Lease: h.plain(x.leaseID), Remaining: x.remaining})
	}
	return out, asError(r.err)
}

// Release hands back each lease in a statement of its own: the model's
// workers release one partition at a time.
func (h *modelHarness) Release(_ context.Context, owner string, leases []partition.Lease) ([]string, error) {
	var out []string
	for _, id := range h.leases(leases) {
		r := h.do(&request{kind: reqRelease, owner: h.owner(owner), lease: id})
		if err := asError(r.err); err != nil {
			return out, err
		}
		if r.released {
			out = append(out, h.name(id.key))
		}
	}
	return out, nil
}

func (h *modelHarness) Fail(_ context.Context, owner string, l partition.Lease, _ string, maxAttempts int) (taskstore.FailResult, error) {
	id, ok := h.lease(l)
	if !ok {
		return taskstore.FailResult{}, partition.ErrFenced
	}
	r := h.do(&request{kind: reqFail, owner: h.owner(owner), lease: id, attempts: maxAttempts})
	if err := asError(r.err); err != nil {
		return taskstore.FailResult{}, err
	}
	if !r.released {
		return taskstore.FailResult{}, partition.ErrFenced
	}
	return taskstore.FailResult{Attempts: r.attempts, Quarantined: r.quarantined, RetryAfter: r.retryAfter}, nil
}

func (h *modelHarness) Retry(_ context.Context, key string) (bool, error) {
	k, ok := h.key(key)
	if !ok {
		return false, partition.ErrNotFound
	}
	r := h.do(&request{kind: reqRetry, key: k})
	return r.released, asError(r.err)
}

func (h *modelHarness) Progress(_ context.Context, key string) (int64, int64, error) {
	k, ok := h.key(key)
	if !ok {
		return 0, 0, partition.ErrNotFound
	}
	r := h.do(&request{kind: reqProgress, key: k})
	return r.version, r.position, asError(r.err)
}

func (h *modelHarness) FairShareLoad(_ context.Context, self string) (taskstore.Load, error) {
	id := 0 // nobody
	if self != "" {
		id = h.owner(self)
	}
	r := h.do(&request{kind: reqFairShareLoad, owner: id, maxPartitions: storetest.MaxPartitions})
	return r.load, asError(r.err)
}

func (h *modelHarness) QuarantinedCount(context.Context) (int, error) {
	r := h.do(&request{kind: reqQuarantinedCount})
	return r.count, asError(r.err)
}

func (h *modelHarness) SegmentsHeldByOthers(_ context.Context, self string, partitions []string) (int64, error) {
	var keys []int
	for _, p := range partitions {
		if k, ok := h.keys[p]; ok {
			keys = append(keys, k)
		}
	}
	r := h.do(&request{kind: reqSegmentsHeldByOthers, owner: h.owner(self), keys: keys})
	return r.items, asError(r.err)
}

func (h *modelHarness) PendingWork(context.Context) (bool, error) {
	r := h.do(&request{kind: reqPendingWork})
	return r.count > 0, asError(r.err)
}

func (h *modelHarness) StopWorker(_ context.Context, owner string) error {
	return asError(h.do(&request{kind: reqStopWorker, owner: h.owner(owner)}).err)
}

// Rewind sends the rewind on a connection of its own and runs the model
// until it replies; with whileWaiting, first until it waits for a row
// lock, then calls whileWaiting (whose statements run the model on).
func (h *modelHarness) Rewind(_ context.Context, key string, position int64, whileWaiting func()) (partition.Rewound, error) {
	k, ok := h.keys[key]
	if !ok {
		return partition.Rewound{}, fmt.Errorf("rewinding %s: %w: no such partition", key, partition.ErrBadRewind)
	}
	s := h.s
	c := s.newConn(nil)
	defer s.st.arrive(c, &request{kind: reqClose})
	var got *response
	c.internal = func(r response) { got = &r }
	s.st.arrive(c, &request{kind: reqRewind, key: k, newPos: position})
	step := func() {
		e := s.q.pop()
		s.now = e.at
		s.events++
		e.fn()
	}
	if whileWaiting != nil {
		waiting := func() bool {
			for _, ss := range s.st.sessions {
				if ss.conn == c && ss.cur != nil && ss.cur.waiting != nil {
					return true
				}
			}
			return false
		}
		for got == nil && !waiting() && len(s.q) > 0 {
			step()
		}
		if got != nil {
			return partition.Rewound{}, fmt.Errorf("model store: the rewind ended without waiting (%s)", got.err)
		}
		whileWaiting()
	}
	for got == nil && len(s.q) > 0 {
		step()
	}
	switch {
	case got == nil:
		return partition.Rewound{}, errors.New("model store: no reply")
	case got.err == errNotFound:
		return partition.Rewound{}, fmt.Errorf("rewinding %s to %d: %w", key, position, partition.ErrBadRewind)
	case got.err != errNone:
		return partition.Rewound{}, asError(got.err)
	}
	return partition.Rewound{Key: key, Generation: got.generation, Version: got.version,
		PreviousGeneration: got.prevGeneration, PreviousPosition: got.prevPosition}, nil
}

func (h *modelHarness) Begin(_ context.Context, owner string, l partition.Lease) (storetest.Batch, partition.Checkpoint, error) {
	id, ok := h.lease(l)
	if !ok {
		return nil, partition.Checkpoint{}, partition.ErrFenced
	}
	c := h.s.newConn(nil)
	r := h.call(c, &request{kind: reqBeginFence, owner: h.owner(owner), lease: id})
	if err := asError(r.err); err != nil {
		h.s.st.arrive(c, &request{kind: reqClose})
		return nil, partition.Checkpoint{}, err
	}
	return &modelBatch{h: h, c: c}, partition.Checkpoint{Position: r.position, Available: r.available}, nil
}

// modelBatch is a transaction on a connection of its own.
type modelBatch struct {
	h      *modelHarness
	c      *conn
	closed bool
}

func (b *modelBatch) Advance(_ context.Context, from, to int64) error {
	if to > from {
		if err := asError(b.h.call(b.c, &request{kind: reqWrite, from: from + 1, to: to}).err); err != nil {
			return err
		}
	}
	return asError(b.h.call(b.c, &request{kind: reqAdvance, newPos: to}).err)
}

func (b *modelBatch) Split(_ context.Context, from, to int64, segs []taskstore.Segment) error {
	ss := make([]segSpan, len(segs))
	for i, g := range segs {
		ss[i] = segSpan{g.Start, g.End}
	}
	if err := asError(b.h.call(b.c, &request{kind: reqSplit, segs: ss}).err); err != nil {
		return err
	}
	return asError(b.h.call(b.c, &request{kind: reqAdvance, newPos: to}).err)
}

func (b *modelBatch) Commit(context.Context) error {
	err := asError(b.h.call(b.c, &request{kind: reqCommit}).err)
	b.Rollback()
	return err
}

func (b *modelBatch) Rollback() {
	if !b.closed {
		b.closed = true
		b.h.s.st.arrive(b.c, &request{kind: reqClose})
	}
}

func (h *modelHarness) BeginClaim(_ context.Context, owner string, cand taskstore.Candidate) (storetest.ClaimBatch, partition.Checkpoint, error) {
	k, ok := h.key(cand.Key)
	if !ok {
		return nil, partition.Checkpoint{}, taskstore.ErrClaimLost
	}
	c := h.s.newConn(nil)
	cd := candidate{leaseID{k, cand.Version}, cand.Owned}
	r := h.call(c, &request{kind: reqFenceUnowned, owner: h.owner(owner), cand: cd})
	if err := asError(r.err); err != nil {
		h.s.st.arrive(c, &request{kind: reqClose})
		return nil, partition.Checkpoint{}, err
	}
	return &modelClaimBatch{modelBatch: modelBatch{h: h, c: c}, lease: partition.Lease{Key: cand.Key, Version: cand.Version + 1}},
		partition.Checkpoint{Position: r.position, Available: r.available}, nil
}

// modelClaimBatch is a claim's transaction on a connection of its own.
type modelClaimBatch struct {
	modelBatch
	lease partition.Lease
}

func (b *modelClaimBatch) ClaimAdvance(_ context.Context, from, to int64, release bool) (partition.Lease, error) {
	if to > from {
		if err := asError(b.h.call(b.c, &request{kind: reqWrite, from: from + 1, to: to}).err); err != nil {
			return b.lease, err
		}
	}
	return b.lease, asError(b.h.call(b.c, &request{kind: reqClaimAdvance, newPos: to, release: release}).err)
}

// BeginGroup fences the candidates in key order, each in a claim
// transaction of its own, up to limit: the model has no multi-row claim
// transaction. Its group statements do to each member what the lone ones
// do (taskstore.Store's lone statements are groups of one), and the
// harness runs them back to back with nothing in between, so the suite
// sees them as one statement; the members commit (or roll back) together.
func (h *modelHarness) BeginGroup(ctx context.Context, owner string, cands []taskstore.Candidate, limit int) (storetest.GroupBatch, []taskstore.Fenced, error) {
	sorted := slices.Clone(cands)
	slices.SortFunc(sorted, func(a, b taskstore.Candidate) int { return strings.Compare(a.Key, b.Key) })
	g := &modelGroup{members: map[string]storetest.ClaimBatch{}}
	var fenced []taskstore.Fenced
	for _, c := range sorted {
		if limit > 0 && len(fenced) >= limit {
			break
		}
		b, cp, err := h.BeginClaim(ctx, owner, c)
		if errors.Is(err, taskstore.ErrClaimLost) {
			continue // passed over
		}
		if err != nil {
			g.Rollback()
			return nil, nil, err
		}
		g.members[c.Key] = b
		g.order = append(g.order, c.Key)
		fenced = append(fenced, taskstore.Fenced{Candidate: c, Checkpoint: cp})
	}
	return g, fenced, nil
}

// BeginHeld fences the members as they come, each in a batch
// transaction of its own: the model has no multi-row batch transaction.
// The distributor's held group runs the lone batch's statements (Fence,
// Advance) for each member in one transaction, so the harness runs each
// member's lone statements and commits (or rolls back) the members
// together, as for BeginGroup.
func (h *modelHarness) BeginHeld(_ context.Context, owner string) (storetest.HeldBatch, error) {
	return &modelHeld{h: h, owner: owner, members: map[string]storetest.Batch{}}, nil
}

type modelHeld struct {
	h       *modelHarness
	owner   string
	members map[string]storetest.Batch
	order   []string
}

func (g *modelHeld) Fence(ctx context.Context, l partition.Lease) (partition.Checkpoint, error) {
	b, cp, err := g.h.Begin(ctx, g.owner, l)
	if err != nil {
		return cp, err
	}
	g.members[l.Key] = b
	g.order = append(g.order, l.Key)
	return cp, nil
}

func (g *modelHeld) Advance(ctx context.Context, l partition.Lease, from, to int64) error {
	b, ok := g.members[l.Key]
	if !ok {
		return partition.ErrFenced
	}
	return b.Advance(ctx, from, to)
}

func (g *modelHeld) Commit(ctx context.Context) error {
	var errs []error
	for _, k := range g.order {
		errs = append(errs, g.members[k].Commit(ctx))
	}
	return errors.Join(errs...)
}

func (g *modelHeld) Rollback() {
	for _, k := range g.order {
		g.members[k].Rollback()
	}
}

type modelGroup struct {
	members map[string]storetest.ClaimBatch
	order   []string
}

func (g *modelGroup) ClaimAdvanceGroup(ctx context.Context, steps []storetest.GroupStep) ([]partition.Lease, error) {
	var out []partition.Lease
	for _, st := range steps {
		b, ok := g.members[st.Candidate.Key]
		if !ok {
			return nil, taskstore.ErrClaimLost
		}
		l, err := b.ClaimAdvance(ctx, st.From, st.To, st.Release)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

func (g *modelGroup) Commit(ctx context.Context) error {
	var errs []error
	for _, k := range g.order {
		errs = append(errs, g.members[k].Commit(ctx))
	}
	return errors.Join(errs...)
}

func (g *modelGroup) Rollback() {
	for _, k := range g.order {
		g.members[k].Rollback()
	}
}
