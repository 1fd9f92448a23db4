package taskstore_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
)

// Heartbeats that renew a lease and batches that move a checkpoint rewrite
// the task row heap-only (HOT): no index covers what they change, so they
// add no index entry, even while another session holds a snapshot that
// keeps every old version. (An index over the lease or the checkpoint
// position made every one of them an ordinary update.)
func TestHeartbeatsAndCheckpointsAreHeapOnlyUpdates(t *testing.T) {
	t.Parallel()
	for _, pinned := range []bool{false, true} {
		name := "unpinned"
		if pinned {
			name = "horizon pinned"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			heapOnlyUpdates(t, pinned)
		})
	}
}

func heapOnlyUpdates(t *testing.T, pinned bool) {
	ctx := context.Background()
	db := pgtest.NewDB(t)
	if _, err := db.ExecContext(ctx, `INSERT INTO baton.tasks (partition_key, available) VALUES ('a', 100), ('b', 100)`); err != nil {
		t.Fatal(err)
	}
	// One connection for everything measured, so that its statistics can
	// be flushed on demand before they are read.
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	s := taskstore.NewStore(conn, "")
	w := taskstore.Worker{InstanceID: "w#1", Name: "w"}
	if _, err := s.Heartbeat(ctx, w, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	cands, err := s.Candidates(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	won, err := s.Claim(ctx, w.InstanceID, time.Minute, cands)
	if err != nil || len(won) != 2 {
		t.Fatalf("claimed %v, %v; want a and b", won, err)
	}
	leases := []partition.Lease{won[0].Lease, won[1].Lease}
	if pinned {
		// A report's snapshot, held for the rest of the test.
		report, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		defer report.Rollback()
		var n int
		if err := report.QueryRowContext(ctx, `SELECT count(*) FROM baton.tasks`).Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	updated0, hot0 := taskUpdates(t, conn)

	const rounds = 6
	var want int64
	for i := range rounds {
		// A renewal rewrites both leases (ttl below what they have left
		// would only check them: Heartbeat renews whatever is left).
		rs, err := s.Heartbeat(ctx, w, time.Minute, leases)
		if err != nil || len(rs) != 2 || rs[0].Fresh || rs[0].Locked || rs[1].Fresh || rs[1].Locked {
			t.Fatalf("heartbeat %d: %+v, %v; want both leases renewed", i, rs, err)
		}
		want += 2
		// A batch of 5 on each partition.
		for _, l := range leases {
			tx, err := conn.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			cp, err := s.Fence(ctx, tx, w.InstanceID, l)
			if err != nil {
				t.Fatal(err)
			}
			state, _ := json.Marshal(map[string]int64{"cum_gross": 1000 * (cp.Position + 5)})
			if err := s.Advance(ctx, tx, l, cp.Position, cp.Position+5, state); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			want++
		}
	}
	updated, hot := taskUpdates(t, conn)
	if updated-updated0 != want || hot-hot0 != want {
		t.Fatalf("%d heartbeats and %d checkpoints made %d updates of task rows, %d of them heap-only; want %d, all heap-only",
			rounds, 2*rounds, updated-updated0, hot-hot0, want)
	}
}

// taskUpdates flushes conn's table statistics and reads the tasks table's
// update counts: all of them, and those that were heap-only.
func taskUpdates(t *testing.T, conn bun.Conn) (updated, hot int64) {
	t.Helper()
	ctx := context.Background()
	if _, err := conn.ExecContext(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRowContext(ctx, `
		SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = 'baton.tasks'::regclass`).Scan(&updated, &hot); err != nil {
		t.Fatal(err)
	}
	return updated, hot
}
