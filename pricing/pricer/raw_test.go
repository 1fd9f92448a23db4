package pricer_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/uptrace/bun"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/batchconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing/pricer"
)

// claimOne claims key for owner directly in the store.
func claimOne(t *testing.T, db *bun.DB, owner, key string) partition.Lease {
	t.Helper()
	ctx := context.Background()
	store := taskstore.NewStore(db, "").Kind(pricer.Kind)
	var version int64
	if err := db.QueryRow(`SELECT version FROM baton.tasks WHERE partition_key = ?`, key).Scan(&version); err != nil {
		t.Fatal(err)
	}
	won, err := store.Claim(ctx, owner, time.Minute, []taskstore.Candidate{{Key: key, Version: version}})
	if err != nil || len(won) != 1 {
		t.Fatalf("claiming %s: %v (won %d)", key, err, len(won))
	}
	return won[0].Lease
}

// beginOnConn begins a transaction on a connection of its own, on which
// batches built by hand run (batchconn.Attach); done rolls it back, unless
// it committed, and returns the connection.
func beginOnConn(t *testing.T, db *dbconn.DB) (conn bun.Conn, tx bun.Tx, done func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tx, err = conn.BeginTx(ctx, nil); err != nil {
		conn.Close()
		t.Fatal(err)
	}
	return conn, tx, func() {
		_ = tx.Rollback()
		conn.Close()
	}
}

func pricedCount(t *testing.T, db *bun.DB, key string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM baton.priced WHERE contract_id = ?`, key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The priced rows written through Batch.CopyFrom and Batch.Exec belong to the batch's
// transaction: rolled back with it, committed with it, and a repeat of
// committed rows fails on the primary key.
func TestPricedRowsCommitWithTheBatchTransaction(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	loadVectors(t, db)
	// Batches of several rows (COPY) and of one (INSERT).
	for _, tc := range []struct {
		key   string
		limit int
	}{{"basic-3-tiers", 5}, {"no-discount", 1}} {
		t.Run(fmt.Sprintf("%d rows", tc.limit), func(t *testing.T) { pricedRowsCommitWithTheBatch(t, db, tc.key, tc.limit) })
	}
}

func pricedRowsCommitWithTheBatch(t *testing.T, db *dbconn.DB, key string, limit int) {
	ctx := context.Background()
	lease := claimOne(t, db.DB, "w#1", key)
	store := taskstore.NewStore(db, "").Kind(pricer.Kind)

	process := func(commit bool) (distributor.Result, error) {
		conn, tx, done := beginOnConn(t, db)
		defer done()
		cp, err := store.Fence(ctx, tx, "w#1", lease)
		if err != nil {
			t.Fatal(err)
		}
		b := &distributor.Batch{Lease: lease, Owner: "w#1", Tx: tx, Checkpoint: cp, Limit: limit}
		batchconn.Attach(b, conn)
		res, err := pricer.NewStore(db, "").Processor().Process(ctx, b)
		if err != nil || !commit {
			return res, err
		}
		return res, tx.Commit()
	}
	if _, err := process(false); err != nil {
		t.Fatal(err)
	}
	if n := pricedCount(t, db.DB, key); n != 0 {
		t.Fatalf("%d priced rows survived a rolled-back batch", n)
	}
	res, err := process(true)
	if err != nil {
		t.Fatal(err)
	}
	if n := pricedCount(t, db.DB, key); n == 0 || n > limit || int64(n) != res.Position {
		t.Fatalf("%d priced rows after a committed batch up to position %d", n, res.Position)
	}
	// The checkpoint was not advanced (no Advance above): the same rows
	// again collide with the committed ones.
	_, err = process(true)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "23505" {
		t.Fatalf("repeating committed rows: %v, want a unique violation", err)
	}
}

// A batch built without its connection cannot reach the driver: the
// processor fails clearly instead of writing outside the transaction.
func TestBatchWithoutConnection(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	loadVectors(t, db)
	ctx := context.Background()
	lease := claimOne(t, db.DB, "w#1", "basic-3-tiers")
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	cp, err := taskstore.NewStore(db, "").Kind(pricer.Kind).Fence(ctx, tx, "w#1", lease)
	if err != nil {
		t.Fatal(err)
	}
	_, err = pricer.NewStore(db, "").Processor().Process(ctx, &distributor.Batch{Lease: lease, Owner: "w#1", Tx: tx, Checkpoint: cp, Limit: 5})
	if !errors.Is(err, distributor.ErrNoConn) {
		t.Fatalf("Process without a connection: %v, want ErrNoConn", err)
	}
}
