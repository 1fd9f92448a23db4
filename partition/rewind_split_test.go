package partition_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/pgxwork"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/partition"
)

// A split that commits while a rewind waits for the partition's row (the
// batch that splits holds it under its fence) is not missed: the rewind
// deletes the segments that split wrote, so none of the old generation is
// left to be claimed and processed a second time, and the new
// generation's split at the same starts writes its own segments. The
// rewind also names "o", before p, and "p!", which sorts between p and its
// segments: each is rewound too, locked in its place in key order.
//
// Both ways in: a bun transaction (Store.RewindTx, one lock statement
// after the other) and a pgx one (the loader's, its lock statements in one
// pipeline).
func TestRewindDeletesSegmentsSplitWhileItWaits(t *testing.T) {
	t.Parallel()
	for _, viaPgx := range []bool{false, true} {
		name := "bun"
		if viaPgx {
			name = "pgx"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testRewindDeletesSegmentsSplitWhileItWaits(t, viaPgx)
		})
	}
}

func testRewindDeletesSegmentsSplitWhileItWaits(t *testing.T, viaPgx bool) {
	ctx := context.Background()
	url := pgtest.NewURL(t)
	db := pgtest.Open(t, url, dbconn.Options{})
	s := partition.NewStore(pgtest.Handle(db), "")
	ws := taskstore.NewStore(db, "")
	if _, err := s.AddWorks(ctx, []partition.Work{{Key: "p", N: 30}, {Key: "o", N: 5}, {Key: "p!", N: 5}}); err != nil {
		t.Fatal(err)
	}
	claim := func(owner string) partition.Lease {
		t.Helper()
		cands, err := ws.Candidates(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cands {
			if c.Key == "p" {
				won, err := ws.Claim(ctx, owner, time.Minute, []taskstore.Candidate{c})
				if err != nil || len(won) != 1 {
					t.Fatalf("claiming p: won %v, %v", won, err)
				}
				return won[0].Lease
			}
		}
		t.Fatalf("p is not claimable; candidates %v", cands)
		return partition.Lease{}
	}
	segs := []taskstore.Segment{{Start: 0, End: 15}, {Start: 15, End: 30}}

	// A batch of generation 1 splits p and holds its row until it commits.
	old := claim("w#1")
	batch, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = batch.Rollback() }()
	cp, err := ws.Fence(ctx, batch, "w#1", old)
	if err != nil {
		t.Fatal(err)
	}
	if err := ws.Split(ctx, batch, old, cp.Generation, segs); err != nil {
		t.Fatal(err)
	}
	if err := ws.Advance(ctx, batch, old, cp.Position, 30, nil); err != nil {
		t.Fatal(err)
	}

	// The rewind starts before the split commits, and waits for the row.
	type outcome struct {
		gens map[string]int64
		prev map[string]int64 // previous positions (bun only)
		err  error
	}
	done := make(chan outcome, 1)
	rw := []partition.Rewind{{Key: "p!", Position: 1}, {Key: "p", Position: 0}, {Key: "o", Position: 2}}
	var pid int
	if viaPgx {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			t.Fatal(err)
		}
		go func() {
			tx, err := conn.Begin(ctx)
			if err != nil {
				done <- outcome{err: err}
				return
			}
			r := pgxwork.Rewinds{States: make([]json.RawMessage, len(rw))}
			for _, x := range rw {
				r.Keys, r.Positions = append(r.Keys, x.Key), append(r.Positions, x.Position)
			}
			gens, err := pgxwork.Rewind(ctx, tx, "", partition.DefaultKind, r)
			if err == nil {
				err = tx.Commit(ctx)
			} else {
				_ = tx.Rollback(ctx)
			}
			done <- outcome{gens: gens, err: err}
		}()
	} else {
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if err := conn.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			t.Fatal(err)
		}
		go func() {
			tx, err := conn.BeginTx(ctx, nil)
			if err != nil {
				done <- outcome{err: err}
				return
			}
			r, err := s.RewindTx(ctx, tx, rw)
			if err == nil {
				err = tx.Commit()
			} else {
				_ = tx.Rollback()
			}
			o := outcome{gens: map[string]int64{}, prev: map[string]int64{}, err: err}
			for _, x := range r {
				o.gens[x.Key], o.prev[x.Key] = x.Generation, x.PreviousPosition
			}
			done <- o
		}()
	}
	testutil.Eventually(t, 30*time.Second, "the rewind waiting for the splitting batch", func() error {
		select {
		case o := <-done:
			t.Fatalf("the rewind ended while the batch held the row: %+v, %v", o.gens, o.err)
		default:
		}
		var blocked bool
		if err := db.QueryRowContext(ctx, `SELECT cardinality(pg_blocking_pids(?)) > 0`, pid).Scan(&blocked); err != nil {
			return err
		}
		if !blocked {
			return errors.New("not waiting yet")
		}
		return nil
	})
	if err := batch.Commit(); err != nil {
		t.Fatal(err)
	}
	o := testutil.Receive(t, done, 30*time.Second, "the rewind after the split committed")
	if o.err != nil {
		t.Fatal(o.err)
	}
	if len(o.gens) != 3 || o.gens["o"] != 2 || o.gens["p"] != 2 || o.gens["p!"] != 2 {
		t.Fatalf("rewound %v, want o, p and p! at generation 2", o.gens)
	}
	if o.prev != nil && o.prev["p"] != 30 {
		t.Fatalf("previous positions %v, want p after generation 1 at position 30", o.prev)
	}

	// Nothing of generation 1 is left: no segment row, nothing claimable
	// but the partition itself.
	var left []string
	if err := db.NewRaw(`SELECT partition_key FROM baton.tasks WHERE segment_of = 'p' ORDER BY partition_key`).Scan(ctx, &left); err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("segments left after the rewind: %v", left)
	}
	cands, err := ws.Candidates(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, c := range cands {
		keys = append(keys, c.Key)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"o", "p", "p!"}) {
		t.Errorf("claimable after the rewind: %v, want o, p and p!", keys)
	}

	// Generation 2 splits at the same starts.
	next := claim("w#2")
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	cp, err = ws.Fence(ctx, tx, "w#2", next)
	if err != nil {
		t.Fatal(err)
	}
	if cp.Generation != 2 || cp.Position != 0 {
		t.Fatalf("the claim after the rewind fenced generation %d at %d, want 2 at 0", cp.Generation, cp.Position)
	}
	if err := ws.Split(ctx, tx, next, cp.Generation, segs); err != nil {
		t.Fatalf("generation 2's split at the same starts: %v", err)
	}
	if err := ws.Advance(ctx, tx, next, cp.Position, 30, nil); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var gens []int64
	if err := db.NewRaw(`SELECT generation FROM baton.tasks WHERE segment_of = 'p' ORDER BY partition_key`).Scan(ctx, &gens); err != nil {
		t.Fatal(err)
	}
	if len(gens) != 2 || gens[0] != 2 || gens[1] != 2 {
		t.Errorf("segments' generations after generation 2's split: %v, want [2 2]", gens)
	}
}
