package partition_test

import (
	"context"
	"encoding/json"
	"errors"
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

// A rewind starts a new generation from the position asked for: the claim
// of the previous generation is fenced out (its next batch cannot commit),
// a batch in flight either commits before the rewind or not at all, and
// the next claim resumes from the rewind's position and state under the
// new generation, recorded in the history.
func TestRewindStartsANewGenerationAndFencesTheOldClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.Open(t, pgtest.NewURL(t), dbconn.Options{})
	s := partition.NewStore(pgtest.Handle(db), "")
	ws := taskstore.NewStore(db, "")
	if _, err := s.AddWorks(ctx, []partition.Work{{Key: "a", N: 10}, {Key: "b", N: 5}}); err != nil {
		t.Fatal(err)
	}
	claim := func(owner, key string) partition.Lease {
		t.Helper()
		cands, err := ws.Candidates(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cands {
			if c.Key != key {
				continue
			}
			won, err := ws.Claim(ctx, owner, time.Minute, []taskstore.Candidate{c})
			if err != nil || len(won) != 1 {
				t.Fatalf("claiming %s: won %d, %v", key, len(won), err)
			}
			return won[0].Lease
		}
		t.Fatalf("%s is not claimable; candidates %v", key, cands)
		return partition.Lease{}
	}
	// batch fences l and, if advance, moves its checkpoint to position.
	batch := func(owner string, l partition.Lease, position int64, state string) (partition.Checkpoint, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
		cp, err := ws.Fence(ctx, tx, owner, l)
		if err != nil {
			return cp, err
		}
		if err := ws.Advance(ctx, tx, l, cp.Position, position, json.RawMessage(state)); err != nil {
			return cp, err
		}
		return cp, tx.Commit()
	}

	old := claim("w#1", "a")
	cp, err := batch("w#1", old, 4, `{"n": 4}`)
	if err != nil {
		t.Fatal(err)
	}
	if cp.Generation != 1 {
		t.Fatalf("a partition never rewound fences generation %d, want 1", cp.Generation)
	}

	// A batch in flight holds the row: the rewind waits for it, and the
	// batch's commit is not lost, it is superseded.
	inFlight, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = inFlight.Rollback() }()
	cp, err = ws.Fence(ctx, inFlight, "w#1", old)
	if err != nil {
		t.Fatal(err)
	}
	rewound := make(chan []partition.Rewound, 1)
	failed := make(chan error, 1)
	go func() {
		tx, err := db.BeginTx(ctx, nil)
		if err == nil {
			var r []partition.Rewound
			r, err = s.RewindTx(ctx, tx, []partition.Rewind{{Key: "a", Position: 2, State: json.RawMessage(`{"n": 2}`)}})
			if err == nil {
				if err = tx.Commit(); err == nil {
					rewound <- r
					return
				}
			}
			_ = tx.Rollback()
		}
		failed <- err
	}()
	testutil.Eventually(t, 30*time.Second, "the rewind waiting for the batch's row lock", func() error {
		select {
		case r := <-rewound:
			t.Fatalf("the rewind committed while a batch of the old claim held the row: %+v", r)
		case err := <-failed:
			t.Fatal(err)
		default:
		}
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND strpos(query, '-- baton rewind') > 0`).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return errors.New("not waiting yet")
		}
		return nil
	})
	if err := ws.Advance(ctx, inFlight, old, cp.Position, 6, json.RawMessage(`{"n": 6}`)); err != nil {
		t.Fatal(err)
	}
	if err := inFlight.Commit(); err != nil {
		t.Fatal(err)
	}
	var r []partition.Rewound
	select {
	case r = <-rewound:
	case err := <-failed:
		t.Fatal(err)
	case <-time.After(30 * time.Second):
		t.Fatal("the rewind did not commit after the batch")
	}
	want := partition.Rewound{Key: "a", Generation: 2, Version: old.Version + 1, PreviousGeneration: 1, PreviousPosition: 6}
	if len(r) != 1 || r[0] != want {
		t.Fatalf("rewound %+v, want %+v", r, want)
	}

	// The old claim is fenced out.
	if _, err := batch("w#1", old, 7, `{}`); !errors.Is(err, partition.ErrFenced) {
		t.Fatalf("a batch of the claim the rewind superseded: %v, want ErrFenced", err)
	}
	// The next claim resumes from the rewind's position and state, under
	// generation 2.
	next := claim("w#2", "a")
	if next.Version != want.Version+1 {
		t.Fatalf("claimed %s, want version %d", next, want.Version+1)
	}
	cp, err = batch("w#2", next, 3, `{"n": 3}`)
	if err != nil {
		t.Fatal(err)
	}
	var state map[string]int
	if err := json.Unmarshal(cp.State, &state); err != nil {
		t.Fatal(err)
	}
	if cp.Generation != 2 || cp.Position != 2 || state["n"] != 2 || cp.Available != 10 {
		t.Fatalf("the claim after the rewind fenced %+v (state %s), want generation 2 at position 2 with the rewind's state", cp, cp.State)
	}
	events, err := s.History(ctx, "a", 20)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range events {
		if e.Kind == partition.EventRewound {
			found = e.Version == want.Version && e.Position != nil && *e.Position == 2
		}
	}
	if !found {
		t.Fatalf("no rewound event at version %d, position 2, in %+v", want.Version, events)
	}
}

// A rewind that cannot be done changes nothing: an unknown partition, a
// position beyond the work, a negative position or a repeated key, even
// beside requests that could be done.
func TestRewindRefusesWhatItCannotDo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewURL(t)
	db := pgtest.Open(t, url, dbconn.Options{})
	s := partition.NewStore(pgtest.Handle(db), "")
	if _, err := s.AddWorks(ctx, []partition.Work{{Key: "a", N: 3}}); err != nil {
		t.Fatal(err)
	}
	for name, rw := range map[string][]partition.Rewind{
		"unknown partition":     {{Key: "a"}, {Key: "nope"}},
		"beyond the work":       {{Key: "a", Position: 4}},
		"negative position":     {{Key: "a", Position: -1}},
		"asked twice":           {{Key: "a"}, {Key: "a", Position: 1}},
		"state that is no JSON": {{Key: "a", State: json.RawMessage(`{`)}},
	} {
		if _, err := s.Rewind(ctx, rw); !errors.Is(err, partition.ErrBadRewind) {
			t.Errorf("%s: %v, want ErrBadRewind", name, err)
		}
	}
	var generation, version int64
	if err := db.QueryRowContext(ctx, `SELECT generation, version FROM baton.tasks WHERE partition_key = 'a'`).Scan(&generation, &version); err != nil {
		t.Fatal(err)
	}
	if generation != 1 || version != 0 {
		t.Fatalf("after refused rewinds: generation %d, version %d; want 1 and 0", generation, version)
	}

	// Through pgx, in a transaction of its own, the same statement works.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gens, err := pgxwork.Rewind(ctx, tx, "", partition.DefaultKind, pgxwork.Rewinds{Keys: []string{"a"}, Positions: []int64{3}, States: []json.RawMessage{nil}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if len(gens) != 1 || gens["a"] != 2 {
		t.Fatalf("rewound through pgx: %+v", gens)
	}
	if version, _, err := s.Progress(ctx, "a"); err != nil || version != 1 {
		t.Fatalf("version after the rewind through pgx: %d, %v; want 1", version, err)
	}
	if _, err := pgxwork.Rewind(ctx, conn, "", partition.DefaultKind, pgxwork.Rewinds{Keys: []string{"nope"}, Positions: []int64{0}, States: []json.RawMessage{nil}}); !errors.Is(err, partition.ErrBadRewind) {
		t.Fatalf("an unknown partition through pgx: %v, want ErrBadRewind", err)
	}
}
