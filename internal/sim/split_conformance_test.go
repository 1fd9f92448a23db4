package sim

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/uptrace/bun"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/storetest"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
)

// The model's split is held to taskstore.Store.Split on PostgreSQL: each
// case runs against both, step by step, and what every step returns and
// the task rows after it (keys, segment_of, version, position, available,
// owned) must be the same.
func TestSplitConformance(t *testing.T) {
	t.Parallel()
	for _, sc := range splitCases {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			model := &modelSplitHarness{h: newModelHarness(Config{AdvanceCAS: true})}
			db := pgtest.NewDB(t)
			pg := &pgSplitHarness{t: t, db: db, s: taskstore.NewStore(db, "")}
			want := runSplitCase(t, sc, pg)
			got := runSplitCase(t, sc, model)
			if v := model.h.s.viol; v != nil {
				t.Errorf("the model's invariant checker: %v", v)
			}
			if !slices.Equal(got, want) {
				t.Errorf("the model differs from PostgreSQL\nmodel:\n  %s\nPostgreSQL:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
		})
	}
}

// splitHarness is what the split cases need of a store.
type splitHarness interface {
	AddPartition(key string, available int64)
	Produce(key string, n int64)
	Candidates(ctx context.Context, limit int) ([]taskstore.Candidate, error)
	Claim(ctx context.Context, owner string, cands []taskstore.Candidate) ([]taskstore.Claimed, error)
	Release(ctx context.Context, owner string, leases []partition.Lease) ([]string, error)
	Progress(ctx context.Context, key string) (version, position int64, err error)
	Begin(owner string, l partition.Lease) (splitBatch, partition.Checkpoint, error)
	// Rows is every task row, in key order: key, segment_of, version,
	// position, available, owned.
	Rows() []string
	// WaitBlocked returns once a statement started with SplitAsync waits
	// for a lock.
	WaitBlocked()
}

type splitBatch interface {
	// SplitAsync starts taskstore.Store.Split of the fenced partition
	// into segs; the function it returns waits for its outcome.
	SplitAsync(segs []taskstore.Segment) func() error
	// Advance moves the checkpoint from from to to, writing the items in
	// between first with write (a split writes none).
	Advance(from, to int64, write bool) error
	Commit() error
	Rollback()
}

// splitRun is a case running against one store, keeping its transcript.
type splitRun struct {
	t   *testing.T
	h   splitHarness
	log []string
}

func (r *splitRun) note(format string, args ...any) {
	r.log = append(r.log, fmt.Sprintf(format, args...))
}

func (r *splitRun) rows(when string) {
	r.note("rows %s:", when)
	for _, row := range r.h.Rows() {
		r.note("  %s", row)
	}
	cs, err := r.h.Candidates(context.Background(), 100)
	var keys []string
	for _, c := range cs {
		keys = append(keys, fmt.Sprintf("%s@%d", c.Key, c.Version))
	}
	slices.Sort(keys)
	r.note("candidates %s: %v (%s)", when, keys, outcome(err))
}

// claim claims key for owner from the candidates.
func (r *splitRun) claim(owner, key string) partition.Lease {
	cs, err := r.h.Candidates(context.Background(), 100)
	if err != nil {
		r.t.Fatalf("candidates: %v", err)
	}
	cs = slices.DeleteFunc(cs, func(c taskstore.Candidate) bool { return c.Key != key })
	won, err := r.h.Claim(context.Background(), owner, cs)
	if err != nil || len(won) != 1 {
		r.t.Fatalf("claim of %s by %s: %v, %v", key, owner, won, err)
	}
	r.note("claim %s by %s: v%d position %d available %d", key, owner, won[0].Lease.Version, won[0].Position, won[0].Available)
	return won[0].Lease
}

func (r *splitRun) begin(owner string, l partition.Lease) splitBatch {
	b, cp, err := r.h.Begin(owner, l)
	r.note("fence %s by %s: %s, position %d available %d", l, owner, outcome(err), cp.Position, cp.Available)
	if err != nil {
		r.t.Fatalf("fence %s: %v", l, err)
	}
	return b
}

func (r *splitRun) split(b splitBatch, what string, segs ...taskstore.Segment) error {
	err := b.SplitAsync(segs)()
	r.note("split %s into %s: %s", what, spans(segs), outcome(err))
	return err
}

// advance moves a split partition's checkpoint past its segments.
func (r *splitRun) advance(b splitBatch, what string, from, to int64) {
	r.note("advance %s %d → %d: %s", what, from, to, outcome(b.Advance(from, to, false)))
}

// process writes items from+1 … to and moves the checkpoint to to.
func (r *splitRun) process(b splitBatch, what string, from, to int64) {
	r.note("process %s %d → %d: %s", what, from, to, outcome(b.Advance(from, to, true)))
}

func (r *splitRun) commit(b splitBatch, what string) {
	r.note("commit %s: %s", what, outcome(b.Commit()))
}

func (r *splitRun) progress(key string) {
	v, pos, err := r.h.Progress(context.Background(), key)
	r.note("progress %s: v%d position %d (%s)", key, v, pos, outcome(err))
}

func (r *splitRun) release(owner string, l partition.Lease) {
	keys, err := r.h.Release(context.Background(), owner, []partition.Lease{l})
	r.note("release %s by %s: %v (%s)", l, owner, keys, outcome(err))
}

func spans(segs []taskstore.Segment) string {
	var s []string
	for _, g := range segs {
		s = append(s, fmt.Sprintf("(%d, %d]", g.Start, g.End))
	}
	return strings.Join(s, " ")
}

func seg(start, end int64) taskstore.Segment { return taskstore.Segment{Start: start, End: end} }

func segKeyOf(p string, start int64) string { return partition.SegmentKey(p, start) }

// errModelUnique is the model's unique violation (SQLSTATE 23505).
var errModelUnique = errors.New("model store: unique violation")

func outcome(err error) string {
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, partition.ErrFenced):
		return "fenced"
	case errors.Is(err, partition.ErrCheckpointMoved):
		return "checkpoint moved"
	case errors.Is(err, partition.ErrNotFound), errors.Is(err, sql.ErrNoRows):
		return "not found"
	case errors.Is(err, errModelUnique), errors.As(err, &pgErr) && pgErr.Code == "23505":
		return "unique violation"
	}
	return "error"
}

func runSplitCase(t *testing.T, sc splitCase, h splitHarness) []string {
	r := &splitRun{t: t, h: h}
	sc.run(r)
	r.rows("at the end")
	return r.log
}

type splitCase struct {
	name string
	run  func(r *splitRun)
}

var splitCases = []splitCase{{
	// A split writes unowned, claimable segment rows covering the pending
	// items and moves the partition's checkpoint past them, all at commit;
	// a segment is then claimed, processed and released like a partition.
	name: "SplitCommits",
	run: func(r *splitRun) {
		r.h.AddPartition("p", 10)
		l := r.claim("a", "p")
		b := r.begin("a", l)
		r.split(b, "p", seg(0, 3), seg(3, 6), seg(6, 10))
		r.advance(b, "p", 0, 10)
		r.commit(b, "p")
		r.rows("after the split")
		r.progress("p")
		r.progress(segKeyOf("p", 3))
		sl := r.claim("b", segKeyOf("p", 3))
		sb := r.begin("b", sl)
		r.process(sb, "segment 3", 3, 6)
		r.commit(sb, "segment 3")
		r.release("b", sl)
		r.progress(segKeyOf("p", 3))
	},
}, {
	// A split rolled back leaves nothing behind.
	name: "SplitRollsBack",
	run: func(r *splitRun) {
		r.h.AddPartition("p", 10)
		l := r.claim("a", "p")
		b := r.begin("a", l)
		r.split(b, "p", seg(0, 5), seg(5, 10))
		r.advance(b, "p", 0, 10)
		b.Rollback()
		r.progress("p")
		r.progress(segKeyOf("p", 0))
	},
}, {
	// A later split deletes the partition's finished segments that
	// nobody holds, and keeps those pending or held.
	name: "ResplitDeletesFinishedSegments",
	run: func(r *splitRun) {
		r.h.AddPartition("p", 15)
		l := r.claim("a", "p")
		b := r.begin("a", l)
		r.split(b, "p", seg(0, 5), seg(5, 10), seg(10, 15))
		r.advance(b, "p", 0, 15)
		r.commit(b, "p")
		for _, x := range []struct {
			owner    string
			from, to int64
			release  bool
		}{{"b", 0, 5, true}, {"c", 5, 10, false}} {
			sl := r.claim(x.owner, segKeyOf("p", x.from))
			sb := r.begin(x.owner, sl)
			r.process(sb, "segment", x.from, x.to)
			r.commit(sb, "segment")
			if x.release {
				r.release(x.owner, sl)
			}
		}
		r.h.Produce("p", 10)
		b = r.begin("a", l)
		r.split(b, "p again", seg(15, 20), seg(20, 25))
		r.advance(b, "p", 15, 25)
		r.commit(b, "p again")
	},
}, {
	// The same items split twice under the same claim (a retry after a
	// commit whose outcome was unknown): the second split fails on the
	// segments' primary key.
	name: "SplitOfTheSameItemsFails",
	run: func(r *splitRun) {
		r.h.AddPartition("p", 10)
		l := r.claim("a", "p")
		b1 := r.begin("a", l)
		b2 := r.begin("a", l)
		r.split(b1, "p", seg(0, 5), seg(5, 10))
		r.advance(b1, "p", 0, 10)
		r.commit(b1, "p")
		r.split(b2, "p again", seg(0, 5), seg(5, 10))
		b2.Rollback()
		r.progress("p")
	},
}, {
	// A split of items another transaction is splitting waits for it,
	// then fails if it committed.
	name: "SplitWaitsForACommittedSplit",
	run: func(r *splitRun) {
		r.h.AddPartition("p", 10)
		l := r.claim("a", "p")
		b1 := r.begin("a", l)
		b2 := r.begin("a", l)
		r.split(b1, "p", seg(0, 5), seg(5, 10))
		r.advance(b1, "p", 0, 10)
		wait := b2.SplitAsync([]taskstore.Segment{seg(0, 5), seg(5, 10)})
		r.h.WaitBlocked()
		r.commit(b1, "p")
		r.note("split p again, after waiting: %s", outcome(wait()))
		b2.Rollback()
	},
}, {
	// … and goes ahead if it rolled back.
	name: "SplitWaitsForARolledBackSplit",
	run: func(r *splitRun) {
		r.h.AddPartition("p", 10)
		l := r.claim("a", "p")
		b1 := r.begin("a", l)
		b2 := r.begin("a", l)
		r.split(b1, "p", seg(0, 5), seg(5, 10))
		wait := b2.SplitAsync([]taskstore.Segment{seg(0, 5), seg(5, 10)})
		r.h.WaitBlocked()
		b1.Rollback()
		r.note("split p again, after waiting: %s", outcome(wait()))
		r.advance(b2, "p", 0, 10)
		r.commit(b2, "p again")
	},
}}

// ---- the model --------------------------------------------------------------

type modelSplitHarness struct{ h *modelHarness }

func (m *modelSplitHarness) AddPartition(key string, available int64) {
	m.h.AddPartition(key, available)
}
func (m *modelSplitHarness) Produce(key string, n int64) { m.h.Produce(key, n) }
func (m *modelSplitHarness) Candidates(ctx context.Context, limit int) ([]taskstore.Candidate, error) {
	return m.h.Candidates(ctx, limit)
}
func (m *modelSplitHarness) Claim(ctx context.Context, owner string, cands []taskstore.Candidate) ([]taskstore.Claimed, error) {
	return m.h.Claim(ctx, owner, cands)
}
func (m *modelSplitHarness) Release(ctx context.Context, owner string, leases []partition.Lease) ([]string, error) {
	return m.h.Release(ctx, owner, leases)
}
func (m *modelSplitHarness) Progress(ctx context.Context, key string) (int64, int64, error) {
	return m.h.Progress(ctx, key)
}

func (m *modelSplitHarness) Begin(owner string, l partition.Lease) (splitBatch, partition.Checkpoint, error) {
	b, cp, err := m.h.Begin(context.Background(), owner, l)
	if err != nil {
		return nil, cp, err
	}
	return &modelSplitBatch{b.(*modelBatch)}, cp, nil
}

// modelSplitBatch is a batch's transaction in the model.
type modelSplitBatch struct{ b *modelBatch }

func (m *modelSplitBatch) Advance(from, to int64, write bool) error {
	if write {
		return m.b.Advance(context.Background(), from, to)
	}
	return asError(m.b.h.call(m.b.c, &request{kind: reqAdvance, newPos: to}).err)
}
func (m *modelSplitBatch) Commit() error { return m.b.Commit(context.Background()) }
func (m *modelSplitBatch) Rollback()     { m.b.Rollback() }

func (m *modelSplitHarness) Rows() []string {
	var out []string
	for _, r := range m.h.s.st.rows {
		if !r.visible() {
			continue
		}
		of := ""
		if r.segment {
			of = m.h.names[r.parent]
		}
		out = append(out, fmt.Sprintf("%s segment_of=%q v%d position=%d available=%d owned=%v",
			m.h.name(r.key), of, r.version, r.position, r.available, r.owner != 0))
	}
	slices.Sort(out)
	return out
}

// WaitBlocked runs the model until a statement waits for a lock.
func (m *modelSplitHarness) WaitBlocked() {
	s := m.h.s
	waiting := func() bool {
		for _, ss := range s.st.sessions {
			if ss.cur != nil && ss.cur.waiting != nil {
				return true
			}
		}
		return false
	}
	for !waiting() && len(s.q) > 0 {
		e := s.q.pop()
		s.now = e.at
		s.events++
		e.fn()
	}
}

func (m *modelSplitBatch) SplitAsync(segs []taskstore.Segment) func() error {
	b := m.b
	h := b.h
	var got *response
	var ss []segSpan
	for _, g := range segs {
		ss = append(ss, segSpan{g.Start, g.End})
	}
	b.c.internal = func(r response) { got = &r }
	h.s.st.arrive(b.c, &request{kind: reqSplit, segs: ss})
	return func() error {
		for got == nil && len(h.s.q) > 0 {
			e := h.s.q.pop()
			h.s.now = e.at
			h.s.events++
			e.fn()
		}
		switch {
		case got == nil:
			return fmt.Errorf("model store: no reply")
		case got.err == errUnique:
			return errModelUnique
		}
		return asError(got.err)
	}
}

// ---- PostgreSQL -------------------------------------------------------------

type pgSplitHarness struct {
	t  *testing.T
	db *bun.DB
	s  *taskstore.Store
}

func (p *pgSplitHarness) exec(query string, args ...any) {
	p.t.Helper()
	if _, err := p.db.ExecContext(context.Background(), query, args...); err != nil {
		p.t.Fatalf("fixture: %v", err)
	}
}

func (p *pgSplitHarness) AddPartition(key string, available int64) {
	p.exec(`INSERT INTO baton.tasks (kind, partition_key, available) VALUES (?, ?, ?)`, partition.DefaultKind, key, available)
}

func (p *pgSplitHarness) Produce(key string, n int64) {
	p.exec(`UPDATE baton.tasks SET available = available + ? WHERE kind = ? AND partition_key = ?`, n, partition.DefaultKind, key)
}

func (p *pgSplitHarness) Candidates(ctx context.Context, limit int) ([]taskstore.Candidate, error) {
	return p.s.Candidates(ctx, limit)
}

func (p *pgSplitHarness) Claim(ctx context.Context, owner string, cands []taskstore.Candidate) ([]taskstore.Claimed, error) {
	return p.s.Claim(ctx, owner, storetest.TTL, cands)
}

func (p *pgSplitHarness) Release(ctx context.Context, owner string, leases []partition.Lease) ([]string, error) {
	return p.s.ReleaseFor(ctx, owner, "caught_up", leases)
}

func (p *pgSplitHarness) Progress(ctx context.Context, key string) (int64, int64, error) {
	return p.s.Admin().Progress(ctx, key)
}

func (p *pgSplitHarness) Begin(owner string, l partition.Lease) (splitBatch, partition.Checkpoint, error) {
	ctx := context.Background()
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, partition.Checkpoint{}, err
	}
	cp, err := p.s.Fence(ctx, tx, owner, l)
	if err != nil {
		_ = tx.Rollback()
		return nil, cp, err
	}
	return &pgSplitBatch{s: p.s, tx: tx, l: l, gen: max(cp.Generation, 1)}, cp, nil
}

func (p *pgSplitHarness) Rows() []string {
	rows, err := p.db.QueryContext(context.Background(), `
		SELECT partition_key, coalesce(segment_of, ''), version, position, available, owner IS NOT NULL
		FROM baton.tasks WHERE kind = ?`, partition.DefaultKind)
	if err != nil {
		p.t.Fatalf("reading rows: %v", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var key, of string
		var v, pos, avail int64
		var owned bool
		if err := rows.Scan(&key, &of, &v, &pos, &avail, &owned); err != nil {
			p.t.Fatalf("reading rows: %v", err)
		}
		out = append(out, fmt.Sprintf("%s segment_of=%q v%d position=%d available=%d owned=%v", key, of, v, pos, avail, owned))
	}
	if err := rows.Err(); err != nil {
		p.t.Fatalf("reading rows: %v", err)
	}
	slices.Sort(out)
	return out
}

func (p *pgSplitHarness) WaitBlocked() { pgtest.WaitForLockWait(p.t, p.db, "AS w(key, st, e, state)") }

type pgSplitBatch struct {
	s   *taskstore.Store
	tx  bun.Tx
	l   partition.Lease
	gen int64
}

func (b *pgSplitBatch) SplitAsync(segs []taskstore.Segment) func() error {
	done := make(chan error, 1)
	go func() { done <- b.s.Split(context.Background(), b.tx, b.l, b.gen, segs) }()
	return func() error { return <-done }
}

func (b *pgSplitBatch) Advance(from, to int64, _ bool) error {
	return b.s.Advance(context.Background(), b.tx, b.l, from, to, nil)
}

func (b *pgSplitBatch) Commit() error { return b.tx.Commit() }
func (b *pgSplitBatch) Rollback()     { _ = b.tx.Rollback() }
