package taskstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
)

// taskRow is what a claim's transaction may change on a task row, plus the
// partition's history and output, for before/after comparisons.
type taskRow struct {
	Version   int64
	Owner     *string
	Position  int64
	Available int64
	Attempts  int
	Events    int
	Output    int
}

func readTaskRow(t *testing.T, db bun.IDB, key string) taskRow {
	t.Helper()
	var r taskRow
	if err := db.QueryRowContext(context.Background(), `
		SELECT version, owner, position, available, attempts,
		       (SELECT count(*) FROM baton.events WHERE partition_key = t.partition_key),
		       (SELECT count(*) FROM claim_output WHERE key = t.partition_key)
		FROM baton.tasks t WHERE partition_key = ?`, key).
		Scan(&r.Version, &r.Owner, &r.Position, &r.Available, &r.Attempts, &r.Events, &r.Output); err != nil {
		t.Fatal(err)
	}
	return r
}

func claimBatchDB(t *testing.T) (*bun.DB, *taskstore.Store) {
	t.Helper()
	db := pgtest.NewDB(t)
	if _, err := db.Exec(`CREATE TABLE claim_output (key text, n bigint, PRIMARY KEY (key, n))`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO baton.tasks (partition_key, available) VALUES ('k', 1)`); err != nil {
		t.Fatal(err)
	}
	return db, taskstore.NewStore(db, "")
}

func candidate(t *testing.T, s *taskstore.Store) taskstore.Candidate {
	t.Helper()
	cands, err := s.Candidates(context.Background(), 10)
	if err != nil || len(cands) != 1 {
		t.Fatalf("candidates = %v, %v; want one", cands, err)
	}
	return cands[0]
}

// fenceAndWrite begins a claim's transaction: the fence on the unowned row
// and the batch's output.
func fenceAndWrite(t *testing.T, db *bun.DB, s *taskstore.Store, c taskstore.Candidate) (bun.Tx, partition.Checkpoint) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	cp, err := fenceUnowned(ctx, s, tx, c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO claim_output VALUES (?, 1)`, c.Key); err != nil {
		t.Fatal(err)
	}
	return tx, cp
}

// Claim, output, checkpoint, history and release commit in one
// transaction: the task row, its three events and the output share one
// xmin, and the version moved twice (claim, release).
func TestClaimAdvanceCommitsClaimBatchAndReleaseTogether(t *testing.T) {
	t.Parallel()
	db, s := claimBatchDB(t)
	ctx := context.Background()
	c := candidate(t, s)
	tx, cp := fenceAndWrite(t, db, s, c)
	if cp.Position != 0 || cp.Available != 1 {
		t.Fatalf("fence read %+v, want position 0 of 1", cp)
	}
	l, err := claimAdvance(ctx, s, tx, "w#1", time.Minute, c, 0, 1, nil, true, "caught_up")
	if err != nil {
		t.Fatal(err)
	}
	if l.Version != c.Version+1 {
		t.Fatalf("lease %v, want version %d", l, c.Version+1)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r := readTaskRow(t, db, "k")
	if r.Version != c.Version+2 || r.Owner != nil || r.Position != 1 || r.Events != 3 || r.Output != 1 {
		t.Fatalf("after the claim's transaction: %+v; want version %d, unowned, position 1, 3 events, 1 output row", r, c.Version+2)
	}
	var kinds []string
	var distinctXmin int
	if err := db.QueryRowContext(ctx, `
		SELECT array_agg(kind || '@' || version ORDER BY event_id),
		       (SELECT count(DISTINCT x) FROM (
		          SELECT xmin::text AS x FROM baton.events WHERE partition_key = 'k'
		          UNION ALL SELECT xmin::text FROM baton.tasks WHERE partition_key = 'k'
		          UNION ALL SELECT xmin::text FROM claim_output WHERE key = 'k') a)
		FROM baton.events WHERE partition_key = 'k'`).Scan(pgdialect.Array(&kinds), &distinctXmin); err != nil {
		t.Fatal(err)
	}
	want := []string{"claimed@1", "first_batch@1", "released@1"}
	if len(kinds) != 3 || kinds[0] != want[0] || kinds[1] != want[1] || kinds[2] != want[2] || distinctXmin != 1 {
		t.Fatalf("history %v in %d transactions; want %v in one", kinds, distinctXmin, want)
	}
}

// Without release (leader mode, or work left) the claim commits held: owned
// under the lease's version with a live lease, checkpoint advanced.
func TestClaimAdvanceWithoutReleaseKeepsTheLease(t *testing.T) {
	t.Parallel()
	db, s := claimBatchDB(t)
	ctx := context.Background()
	if _, err := s.Heartbeat(ctx, taskstore.Worker{InstanceID: "w#1", Name: "w"}, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	c := candidate(t, s)
	tx, _ := fenceAndWrite(t, db, s, c)
	l, err := claimAdvance(ctx, s, tx, "w#1", time.Minute, c, 0, 1, nil, false, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r := readTaskRow(t, db, "k")
	if r.Version != l.Version || r.Owner == nil || *r.Owner != "w#1" || r.Position != 1 || r.Events != 2 {
		t.Fatalf("after the claim's transaction: %+v; want %v owned by w#1 at position 1 with 2 events", r, l)
	}
	held, err := s.Inspect(ctx, "w#1", []partition.Lease{l})
	if err != nil || len(held) != 1 || held[0].Remaining < 30*time.Second {
		t.Fatalf("inspect = %v, %v; want the lease held for about a minute", held, err)
	}
	var count int
	if err := db.QueryRowContext(ctx, `SELECT held FROM baton.workers WHERE instance_id = 'w#1'`).Scan(&count); err != nil || count != 1 {
		t.Fatalf("worker's held count = %d, %v; want 1 (raised with the claim, as Claim does)", count, err)
	}
}

// A failure anywhere before the commit (here: the processor fails after
// writing, and the transaction rolls back) leaves the partition exactly as
// it was: claimable at the same version, no output, no history.
func TestClaimTransactionRolledBackLeavesNothing(t *testing.T) {
	t.Parallel()
	db, s := claimBatchDB(t)
	before := readTaskRow(t, db, "k")
	c := candidate(t, s)
	tx, _ := fenceAndWrite(t, db, s, c)
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if after := readTaskRow(t, db, "k"); after != before {
		t.Fatalf("after a rolled-back claim: %+v, want %+v", after, before)
	}
	if again := candidate(t, s); again != c {
		t.Fatalf("candidate after rollback %+v, want %+v (still claimable)", again, c)
	}
	// And the same once the claim statement itself has run.
	tx, _ = fenceAndWrite(t, db, s, c)
	if _, err := claimAdvance(context.Background(), s, tx, "w#1", time.Minute, c, 0, 1, nil, true, "caught_up"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if after := readTaskRow(t, db, "k"); after != before {
		t.Fatalf("after a rolled-back claim: %+v, want %+v", after, before)
	}
}

// Racing claimers: while a claim's transaction holds the fence, an ordinary
// claim skips the row (it cannot change ownership under a batch) and
// another claim transaction loses at its fence; a claim meeting another
// holder of the fence loses and rolls back, leaving nothing; a claim that
// committed first makes the fence find nothing.
func TestClaimTransactionRaces(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ordinary claim skips a fenced row", func(t *testing.T) {
		t.Parallel()
		db, s := claimBatchDB(t)
		c := candidate(t, s)
		tx, _ := fenceAndWrite(t, db, s, c)
		won, err := s.Claim(ctx, "other#1", time.Minute, []taskstore.Candidate{c})
		if err != nil || len(won) != 0 {
			t.Fatalf("claim of a fenced row = %v, %v; want lost", won, err)
		}
		if _, err := claimAdvance(ctx, s, tx, "w#1", time.Minute, c, 0, 1, nil, true, "caught_up"); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if r := readTaskRow(t, db, "k"); r.Version != c.Version+2 || r.Position != 1 {
			t.Fatalf("after the claim's transaction: %+v", r)
		}
	})

	t.Run("a second claim transaction loses at its fence", func(t *testing.T) {
		t.Parallel()
		db, s := claimBatchDB(t)
		c := candidate(t, s)
		txA, _ := fenceAndWrite(t, db, s, c)
		txB, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = txB.Rollback() }()
		if _, err := fenceUnowned(ctx, s, txB, c); !errors.Is(err, taskstore.ErrClaimLost) {
			t.Fatalf("second fence = %v, want ErrClaimLost", err)
		}
		if _, err := claimAdvance(ctx, s, txA, "a#1", time.Minute, c, 0, 1, nil, true, "caught_up"); err != nil {
			t.Fatal(err)
		}
		if err := txA.Commit(); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a claim meeting another fence loses and leaves nothing", func(t *testing.T) {
		t.Parallel()
		db, s := claimBatchDB(t)
		c := candidate(t, s)
		before := readTaskRow(t, db, "k")
		txA, _ := fenceAndWrite(t, db, s, c)
		// Another transaction fencing the row (FOR KEY SHARE, as a claim
		// transaction whose advisory key collides would).
		other, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = other.Rollback() }()
		if _, err := other.ExecContext(ctx, `SELECT 1 FROM baton.tasks WHERE partition_key = 'k' FOR KEY SHARE`); err != nil {
			t.Fatal(err)
		}
		_, err = claimAdvance(ctx, s, txA, "a#1", time.Minute, c, 0, 1, nil, true, "caught_up")
		if !errors.Is(err, taskstore.ErrClaimLost) {
			t.Fatalf("claim while another transaction fences the row = %v, want ErrClaimLost", err)
		}
		if err := txA.Rollback(); err != nil {
			t.Fatal(err)
		}
		if r := readTaskRow(t, db, "k"); r != before {
			t.Fatalf("after the lost claim: %+v, want %+v", r, before)
		}
		if err := other.Rollback(); err != nil {
			t.Fatal(err)
		}
		txB, _ := fenceAndWrite(t, db, s, c)
		if _, err := claimAdvance(ctx, s, txB, "b#1", time.Minute, c, 0, 1, nil, true, "caught_up"); err != nil {
			t.Fatalf("the claim after the other fence ended: %v", err)
		}
		if err := txB.Commit(); err != nil {
			t.Fatal(err)
		}
		if r := readTaskRow(t, db, "k"); r.Version != c.Version+2 || r.Position != 1 || r.Events != 3 {
			t.Fatalf("after the winning claim: %+v", r)
		}
	})

	t.Run("a committed claim fences out the candidate", func(t *testing.T) {
		t.Parallel()
		db, s := claimBatchDB(t)
		c := candidate(t, s)
		if won, err := s.Claim(ctx, "other#1", time.Minute, []taskstore.Candidate{c}); err != nil || len(won) != 1 {
			t.Fatalf("claim = %v, %v", won, err)
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
		if _, err := fenceUnowned(ctx, s, tx, c); !errors.Is(err, taskstore.ErrClaimLost) {
			t.Fatalf("fence of a claimed row = %v, want ErrClaimLost", err)
		}
		// Even when the candidate is re-read at the new version: it has an
		// owner, so it is a takeover, never claimed this way.
		if _, err := fenceUnowned(ctx, s, tx, taskstore.Candidate{Key: c.Key, Version: c.Version + 1}); !errors.Is(err, taskstore.ErrClaimLost) {
			t.Fatalf("fence of an owned row = %v, want ErrClaimLost", err)
		}
	})
}

// fenceUnowned fences c alone (a group of one), as a worker does for a
// claim with its first batch; ErrClaimLost if it was not fenced.
func fenceUnowned(ctx context.Context, s *taskstore.Store, tx bun.Tx, c taskstore.Candidate) (partition.Checkpoint, error) {
	fenced, err := s.FenceUnownedGroup(ctx, tx, []taskstore.Candidate{c}, 1)
	if err != nil {
		return partition.Checkpoint{}, err
	}
	if len(fenced) == 0 {
		return partition.Checkpoint{}, fmt.Errorf("fencing %s@v%d for its claim: %w", c.Key, c.Version, taskstore.ErrClaimLost)
	}
	return fenced[0].Checkpoint, nil
}

// claimAdvance claims c fenced by fenceUnowned with its first batch (a
// group of one).
func claimAdvance(ctx context.Context, s *taskstore.Store, tx bun.Tx, owner string, ttl time.Duration, c taskstore.Candidate,
	from, position int64, state json.RawMessage, release bool, reason string) (partition.Lease, error) {
	leases, err := s.ClaimAdvanceGroup(ctx, tx, owner, ttl,
		[]taskstore.ClaimStep{{Candidate: c, From: from, Position: position, State: state, Release: release}}, reason)
	return leases[0], err
}
