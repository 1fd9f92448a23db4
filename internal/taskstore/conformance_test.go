package taskstore_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/batonhq/baton/internal/leaseinfo"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/storetest"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/partition"
)

// The store's contract, the one the simulator's model is held to as well.
func TestStoreContract(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		db := pgtest.NewDB(t)
		return &pgHarness{t: t, db: db, s: taskstore.NewStore(db, "")}
	})
}

// pgHarness runs the contract against taskstore.Store; its fixtures
// write the rows directly, back-dating leases instead of waiting.
type pgHarness struct {
	t  *testing.T
	db *bun.DB
	s  *taskstore.Store
}

func (h *pgHarness) exec(query string, args ...any) {
	h.t.Helper()
	if _, err := h.db.ExecContext(context.Background(), query, args...); err != nil {
		h.t.Fatalf("fixture: %v", err)
	}
}

func (h *pgHarness) AddPartition(key string, available int64) {
	h.AddPartitionOfKind(partition.DefaultKind, key, available)
}

func (h *pgHarness) AddPartitionOfKind(kind, key string, available int64) {
	h.exec(`INSERT INTO baton.tasks (kind, partition_key, available) VALUES (?, ?, ?)`, kind, key, available)
}

func (h *pgHarness) Produce(key string, n int64) {
	h.exec(`UPDATE baton.tasks SET available = available + ? WHERE kind = ? AND partition_key = ?`, n, partition.DefaultKind, key)
}

func (h *pgHarness) ExpireLease(key string) { h.ExpireLeaseOfKind(partition.DefaultKind, key) }

func (h *pgHarness) ExpireLeaseOfKind(kind, key string) {
	h.exec(`UPDATE baton.tasks SET lease_expires_at = now() - interval '1 millisecond'
		WHERE kind = ? AND partition_key = ? AND lease_expires_at > now() AND lease_expires_at < 'infinity'`, kind, key)
}

// OfKind is the contract's operations on a store of kind, over the same
// database.
func (h *pgHarness) OfKind(kind string) storetest.Store {
	return &pgHarness{t: h.t, db: h.db, s: h.s.Kind(kind)}
}

func (h *pgHarness) Pause(key string) {
	if _, err := h.s.Admin().Pause(context.Background(), "conformance", "", key); err != nil {
		h.t.Fatal(err)
	}
}

func (h *pgHarness) Resume(key string) {
	if _, err := h.s.Admin().Resume(context.Background(), "conformance", key); err != nil {
		h.t.Fatal(err)
	}
}

func (h *pgHarness) AgeLease(key string, left time.Duration) {
	h.exec(`UPDATE baton.tasks SET lease_expires_at = now() + ? * interval '1 microsecond'
		WHERE kind = ? AND partition_key = ? AND lease_expires_at > now() AND lease_expires_at < 'infinity'`,
		left.Microseconds(), partition.DefaultKind, key)
}

func (h *pgHarness) ExpireWorker(owner string) {
	h.exec(`UPDATE baton.workers SET expires_at = now() - interval '1 millisecond' WHERE instance_id = ?`, owner)
}

func (h *pgHarness) Candidates(ctx context.Context, limit int) ([]taskstore.Candidate, error) {
	return h.s.Candidates(ctx, limit)
}

func (h *pgHarness) StaleCandidates(ctx context.Context, limit int) ([]taskstore.Candidate, error) {
	return h.s.StaleCandidates(ctx, limit)
}

func (h *pgHarness) Claim(ctx context.Context, owner string, cands []taskstore.Candidate) ([]taskstore.Claimed, error) {
	return h.s.Claim(ctx, owner, storetest.TTL, cands)
}

func (h *pgHarness) HeartbeatBelow(ctx context.Context, owner string, wanted int, leases []partition.Lease) ([]leaseinfo.Renewal, error) {
	w := taskstore.Worker{InstanceID: owner, Name: owner, Hostname: "test", PID: 1, Mode: "lock", Wanted: wanted}
	return h.s.HeartbeatBelow(ctx, w, storetest.TTL, storetest.RenewBelow, leases)
}

func (h *pgHarness) Inspect(ctx context.Context, owner string, leases []partition.Lease) ([]leaseinfo.Owned, error) {
	return h.s.Inspect(ctx, owner, leases)
}

func (h *pgHarness) Release(ctx context.Context, owner string, leases []partition.Lease) ([]string, error) {
	return h.s.ReleaseFor(ctx, owner, "rebalance", leases)
}

func (h *pgHarness) Fail(ctx context.Context, owner string, l partition.Lease, cause string, maxAttempts int) (taskstore.FailResult, error) {
	return h.s.Fail(ctx, owner, l, cause, storetest.Backoff, storetest.MaxBackoff, maxAttempts)
}

func (h *pgHarness) Retry(ctx context.Context, key string) (bool, error) {
	return h.s.Admin().Retry(ctx, key)
}

func (h *pgHarness) Progress(ctx context.Context, key string) (int64, int64, error) {
	return h.s.Admin().Progress(ctx, key)
}

func (h *pgHarness) FairShareLoad(ctx context.Context, self string) (taskstore.Load, error) {
	return h.s.FairShareLoad(ctx, self, storetest.MaxPartitions, storetest.TTL)
}

func (h *pgHarness) QuarantinedCount(ctx context.Context) (int, error) {
	return h.s.QuarantinedCount(ctx)
}

func (h *pgHarness) SegmentsHeldByOthers(ctx context.Context, self string, partitions []string) (int64, error) {
	return h.s.SegmentsHeldByOthers(ctx, self, partitions)
}

func (h *pgHarness) PendingWork(ctx context.Context) (bool, error) {
	return h.s.PendingWork(ctx)
}

func (h *pgHarness) StopWorker(ctx context.Context, owner string) error {
	return h.s.StopWorker(ctx, owner)
}

// Rewind runs the rewind in a transaction of its own on a connection of
// its own, and with whileWaiting waits until that connection's backend
// is blocked by another (pg_blocking_pids) before calling it.
func (h *pgHarness) Rewind(ctx context.Context, key string, position int64, whileWaiting func()) (partition.Rewound, error) {
	conn, err := h.db.Conn(ctx)
	if err != nil {
		return partition.Rewound{}, err
	}
	defer conn.Close()
	var pid int
	if err := conn.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		return partition.Rewound{}, err
	}
	type outcome struct {
		r   []partition.Rewound
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			done <- outcome{err: err}
			return
		}
		r, err := h.s.Admin().RewindTx(ctx, tx, []partition.Rewind{{Key: key, Position: position}})
		if err == nil {
			err = tx.Commit()
		} else {
			_ = tx.Rollback()
		}
		done <- outcome{r, err}
	}()
	if whileWaiting != nil {
		testutil.Eventually(h.t, 30*time.Second, "the rewind waiting for a row lock", func() error {
			select {
			case o := <-done:
				done <- o
				return errors.New("the rewind ended without waiting")
			default:
			}
			var blocked bool
			if err := h.db.QueryRowContext(ctx, `SELECT cardinality(pg_blocking_pids(?)) > 0`, pid).Scan(&blocked); err != nil {
				return err
			}
			if !blocked {
				return errors.New("not waiting yet")
			}
			return nil
		})
		whileWaiting()
	}
	o := testutil.Receive(h.t, done, 30*time.Second, "the rewind's outcome")
	if o.err != nil {
		return partition.Rewound{}, o.err
	}
	if len(o.r) != 1 {
		return partition.Rewound{}, fmt.Errorf("rewound %+v, want %s alone", o.r, key)
	}
	return o.r[0], nil
}

func (h *pgHarness) Begin(ctx context.Context, owner string, l partition.Lease) (storetest.Batch, partition.Checkpoint, error) {
	tx, err := h.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, partition.Checkpoint{}, err
	}
	cp, err := h.s.Fence(ctx, tx, owner, l)
	if err != nil {
		_ = tx.Rollback()
		return nil, cp, err
	}
	return &pgBatch{s: h.s, tx: tx, l: l, gen: cp.Generation}, cp, nil
}

type pgBatch struct {
	s   *taskstore.Store
	tx  bun.Tx
	l   partition.Lease
	gen int64 // the generation the fence read
}

func (b *pgBatch) Advance(ctx context.Context, from, to int64) error {
	return b.s.Advance(ctx, b.tx, b.l, from, to, nil)
}

func (b *pgBatch) Split(ctx context.Context, from, to int64, segs []taskstore.Segment) error {
	if err := b.s.Split(ctx, b.tx, b.l, b.gen, segs); err != nil {
		return err
	}
	return b.s.Advance(ctx, b.tx, b.l, from, to, nil)
}

func (b *pgBatch) Commit(context.Context) error { return b.tx.Commit() }

func (b *pgBatch) Rollback() { _ = b.tx.Rollback() }

func (h *pgHarness) BeginHeld(ctx context.Context, owner string) (storetest.HeldBatch, error) {
	tx, err := h.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return &pgHeld{s: h.s, tx: tx, owner: owner}, nil
}

// pgHeld is a held group's transaction: every member's statements in it.
type pgHeld struct {
	s     *taskstore.Store
	tx    bun.Tx
	owner string
}

func (g *pgHeld) Fence(ctx context.Context, l partition.Lease) (partition.Checkpoint, error) {
	return g.s.Fence(ctx, g.tx, g.owner, l)
}

func (g *pgHeld) Advance(ctx context.Context, l partition.Lease, from, to int64) error {
	return g.s.Advance(ctx, g.tx, l, from, to, nil)
}

func (g *pgHeld) Commit(context.Context) error { return g.tx.Commit() }

func (g *pgHeld) Rollback() { _ = g.tx.Rollback() }

func (h *pgHarness) BeginClaim(ctx context.Context, owner string, c taskstore.Candidate) (storetest.ClaimBatch, partition.Checkpoint, error) {
	tx, err := h.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, partition.Checkpoint{}, err
	}
	cp, err := fenceUnowned(ctx, h.s, tx, c)
	if err != nil {
		_ = tx.Rollback()
		return nil, cp, err
	}
	return &pgClaimBatch{s: h.s, tx: tx, c: c, owner: owner}, cp, nil
}

type pgClaimBatch struct {
	s     *taskstore.Store
	tx    bun.Tx
	c     taskstore.Candidate
	owner string
}

func (b *pgClaimBatch) ClaimAdvance(ctx context.Context, from, to int64, release bool) (partition.Lease, error) {
	return claimAdvance(ctx, b.s, b.tx, b.owner, storetest.TTL, b.c, from, to, nil, release, "caught_up")
}

func (b *pgClaimBatch) Commit(context.Context) error { return b.tx.Commit() }

func (b *pgClaimBatch) Rollback() { _ = b.tx.Rollback() }

func (h *pgHarness) BeginGroup(ctx context.Context, owner string, cands []taskstore.Candidate, limit int) (storetest.GroupBatch, []taskstore.Fenced, error) {
	tx, err := h.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, nil, err
	}
	fenced, err := h.s.FenceUnownedGroup(ctx, tx, cands, limit)
	if err != nil {
		_ = tx.Rollback()
		return nil, nil, err
	}
	return &pgGroup{s: h.s, tx: tx, owner: owner}, fenced, nil
}

type pgGroup struct {
	s     *taskstore.Store
	tx    bun.Tx
	owner string
}

func (g *pgGroup) ClaimAdvanceGroup(ctx context.Context, steps []storetest.GroupStep) ([]partition.Lease, error) {
	cs := make([]taskstore.ClaimStep, len(steps))
	for i, st := range steps {
		cs[i] = taskstore.ClaimStep{Candidate: st.Candidate, From: st.From, Position: st.To, Release: st.Release}
	}
	return g.s.ClaimAdvanceGroup(ctx, g.tx, g.owner, storetest.TTL, cs, "caught_up")
}

func (g *pgGroup) Commit(context.Context) error { return g.tx.Commit() }

func (g *pgGroup) Rollback() { _ = g.tx.Rollback() }
