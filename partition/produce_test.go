package partition_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/batonhq/baton/internal/notify"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"
	"golang.org/x/sync/errgroup"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/pgxwork"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
)

// Work added in the producer's transaction is invisible and silent until it
// commits, and gone without a trace when it rolls back; committed, it is
// claimable and the workers were notified after the producer's own rows.
func TestAddWorkIsPartOfTheProducersTransaction(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	db := pgtest.Open(t, url, dbconn.Options{})
	ctx := context.Background()
	listener := pgtest.Listen(t, url, notify.Channel)
	s := partition.NewStore(pgtest.Handle(db), "")
	ws := taskstore.NewStore(db, "") // the workers' statements
	if _, err := db.ExecContext(ctx, `CREATE TABLE public.orders (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}

	// Rolled back: nothing.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddWorkTx(ctx, tx, "gone", 3); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}

	// Committed: visible with the producer's own row, and notified.
	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO public.orders VALUES ('o1')`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddWorksTx(ctx, tx, []partition.Work{{Key: "b", N: 2}, {Key: "a", N: 1}, {Key: "b", N: 3}}); err != nil {
		t.Fatal(err)
	}
	if c, err := ws.Candidates(ctx, 10); err != nil || len(c) != 0 {
		t.Fatalf("candidates before the producer commits: %v, %v; want none", c, err)
	}
	if err := ws.Notify(ctx, "marker"); err != nil {
		t.Fatal(err)
	}
	if got := listener.Next(); got != notify.Payload("marker", partition.DefaultKind) {
		t.Fatalf("first notification = %q, want the marker: the producer's was sent before its commit", got)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	payload := listener.Next()
	if reason, kind := notify.Parse(payload); reason != notify.Work || kind != partition.DefaultKind {
		t.Fatalf("notification after commit = %q, want work of the default kind", payload)
	}
	// It says when the producer's statement made the partition claimable
	// (before the commit, when the transaction ran): what a worker's floor
	// is lowered to.
	since, ok := notify.Since(payload)
	if !ok {
		t.Fatalf("notification after commit = %q, without the time the work was added", payload)
	}
	var at time.Time
	if err := db.QueryRow(`SELECT claimable_at FROM baton.tasks WHERE partition_key = 'a'`).Scan(&at); err != nil {
		t.Fatal(err)
	}
	if d := since.Sub(at); d < -time.Second || d > time.Second {
		t.Fatalf("notification says claimable since %v, the row since %v", since, at)
	}
	rows, _, err := s.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, r := range rows {
		got[r.Key] = r.Pending
	}
	if len(got) != 2 || got["a"] != 1 || got["b"] != 5 {
		t.Fatalf("pending after commit = %v, want a:1 b:5 and no rolled-back partition", got)
	}

	// More work on an existing partition adds to it.
	if _, err := s.AddWork(ctx, "a", 4); err != nil {
		t.Fatal(err)
	}
	if got := listener.Next(); !strings.HasPrefix(got, notify.Payload(notify.Work, partition.DefaultKind)+" ") {
		t.Fatalf("notification = %q, want work", got)
	}
	var avail int64
	if err := db.QueryRow(`SELECT available FROM baton.tasks WHERE partition_key = 'a'`).Scan(&avail); err != nil || avail != 5 {
		t.Fatalf("a available = %d, %v; want 5", avail, err)
	}

	for _, bad := range []partition.Work{{Key: "", N: 1}, {Key: "x", N: -1}} {
		if _, err := s.AddWorks(ctx, []partition.Work{bad}); err == nil {
			t.Errorf("AddWorks(%+v) accepted", bad)
		}
	}
}

// A producer does not wait for a batch in flight on the same partition: its
// lock (FOR NO KEY UPDATE) does not conflict with the batch's fence, and the
// batch commits after it with the checkpoint it read.
func TestAddWorkDoesNotWaitForABatch(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	s := partition.NewStore(pgtest.Handle(db), "")
	ws := taskstore.NewStore(db, "")
	if _, err := s.AddWork(ctx, "k", 5); err != nil {
		t.Fatal(err)
	}
	won, err := ws.Claim(ctx, "w#1", time.Minute, []taskstore.Candidate{{Key: "k", Version: 0}})
	if err != nil || len(won) != 1 {
		t.Fatalf("claim: %v %v", won, err)
	}
	batch, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = batch.Rollback() }()
	cp, err := ws.Fence(ctx, batch, "w#1", won[0].Lease)
	if err != nil || cp.Available != 5 {
		t.Fatalf("fence: %+v %v", cp, err)
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := s.AddWork(actx, "k", 2); err != nil {
		t.Fatalf("adding work while a batch holds the fence: %v", err)
	}
	if err := ws.Advance(ctx, batch, won[0].Lease, 0, 5, nil); err != nil {
		t.Fatal(err)
	}
	if err := batch.Commit(); err != nil {
		t.Fatal(err)
	}
	rows, _, err := s.Status(ctx)
	if err != nil || len(rows) != 1 || rows[0].Processed != 5 || rows[0].Pending != 2 {
		t.Fatalf("after batch and producer: %+v, %v; want position 5, 2 pending", rows, err)
	}
	if _, err := s.AddWork(ctx, "k", -1); err == nil || !strings.Contains(err.Error(), "taken back") {
		t.Fatalf("negative work: %v", err)
	}
}

// AddWorksPgx is the same producer statement on a pgx transaction: keys
// merged, counts added to existing partitions, nothing kept on rollback.
func TestAddWorksOnAPgxTransaction(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	db := pgtest.Open(t, url, dbconn.Options{})
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	s := partition.NewStore(pgtest.Handle(db), "")
	if _, err := s.AddWork(ctx, "b", 2); err != nil {
		t.Fatal(err)
	}
	for _, commit := range []bool{false, true} {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := pgxwork.AddWorks(ctx, tx, "", partition.DefaultKind, pgxwork.Work{Keys: []string{"b", "a", "b"}, N: []int64{5, 1, 1}}); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := pgxwork.AddWorks(ctx, conn, "", partition.DefaultKind, pgxwork.Work{Keys: []string{"c"}, N: []int64{-1}}); err == nil {
		t.Fatal("negative work accepted")
	}
	got := map[string]int64{}
	rows, err := db.QueryContext(ctx, `SELECT partition_key, available FROM baton.tasks`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		got[k] = n
	}
	if len(got) != 2 || got["a"] != 1 || got["b"] != 8 {
		t.Fatalf("available = %v, want a:1 b:8 (the rolled-back load left nothing)", got)
	}
}

// Producers of one partition running at once each get their own range of
// numbers, and together the ranges cover 1 … total without a gap or an
// overlap: the numbering is the statement's, under the row lock, not a
// read of the highest number stored. Each producer writes its items under
// the numbers it got, in its own transaction, so a collision would fail
// the items' primary key; a rolled-back producer's numbers are reused.
func TestConcurrentProducersNumberTheirItemsWithoutCollision(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewURL(t), dbconn.Options{})
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE public.items (customer text, seq bigint, producer int, PRIMARY KEY (customer, seq))`); err != nil {
		t.Fatal(err)
	}
	s := partition.NewStore(pgtest.Handle(db), "").Kind("orders")
	const producers, rounds = 6, 15
	var g errgroup.Group
	for p := range producers {
		g.Go(func() error {
			for i := range rounds {
				n := int64(1 + (p+i)%4)
				err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
					r, err := s.AddWorkTx(ctx, tx, "acme", n)
					if err != nil {
						return err
					}
					if r.Key != "acme" || r.N() != n {
						return fmt.Errorf("AddWork(acme, %d) = %+v", n, r)
					}
					if _, err := tx.ExecContext(ctx, `INSERT INTO public.items SELECT 'acme', g, ? FROM generate_series(?::bigint, ?::bigint) g`,
						p, r.First, r.Last); err != nil {
						return err
					}
					if i%5 == 4 {
						return errRollback // its numbers go to the next producer
					}
					return nil
				})
				if err != nil && !errors.Is(err, errRollback) {
					return fmt.Errorf("producer %d round %d: %w", p, i, err)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	var available, count, maxSeq int64
	if err := db.QueryRowContext(ctx, `SELECT available FROM baton.tasks WHERE kind = 'orders' AND partition_key = 'acme'`).Scan(&available); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRowContext(ctx, `SELECT count(*), coalesce(max(seq), 0) FROM public.items`).Scan(&count, &maxSeq); err != nil {
		t.Fatal(err)
	}
	if count == 0 || count != available || maxSeq != available {
		t.Fatalf("items: %d stored, highest %d; available %d: want all three equal", count, maxSeq, available)
	}

	// Several partitions at once, one of them named twice: a range per
	// distinct key, in key order, following the earlier items.
	var rs []partition.Range
	err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var err error
		rs, err = s.AddWorksTx(ctx, tx, []partition.Work{{Key: "zeta", N: 2}, {Key: "acme", N: 3}, {Key: "zeta", N: 1}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []partition.Range{{Key: "acme", First: available + 1, Last: available + 3}, {Key: "zeta", First: 1, Last: 3}}
	if fmt.Sprint(rs) != fmt.Sprint(want) {
		t.Fatalf("AddWorks ranges = %+v, want %+v", rs, want)
	}
	// No items: an empty range after the last.
	r, err := s.AddWork(ctx, "zeta", 0)
	if err != nil || r.First != 4 || r.Last != 3 || r.N() != 0 {
		t.Fatalf("AddWork(zeta, 0) = %+v, %v; want the empty range 4…3", r, err)
	}
}

var errRollback = errors.New("rolled back on purpose")
