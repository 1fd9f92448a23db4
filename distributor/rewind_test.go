package distributor_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/partition"
)

// genProc writes one row per item and generation, keyed (key, generation,
// n): an item output twice within a generation is a primary-key violation.
type genProc struct {
	before func(b *distributor.Batch)
}

func (p *genProc) Process(ctx context.Context, b *distributor.Batch) (distributor.Result, error) {
	if p.before != nil {
		p.before(b)
	}
	end := min(b.Checkpoint.Position+int64(b.Limit), b.Checkpoint.Available)
	if _, err := b.Tx.ExecContext(ctx, `
		INSERT INTO gen_output (key, generation, n)
		SELECT ?, ?, n FROM generate_series(?::bigint, ?::bigint) n`,
		b.Lease.Key, b.Checkpoint.Generation, b.Checkpoint.Position+1, end); err != nil {
		return distributor.Result{}, err
	}
	return distributor.Result{Position: end}, nil
}

// A partition rewound while a worker processes it: the batch in flight
// commits before the rewind (which waits for its row lock), the worker's
// claim is fenced out, and the partition is processed again from the
// rewind's position under generation 2, each item of each generation once,
// nothing of generation 1 beyond the position the rewind replaced.
func TestRewindWhileProcessing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.db.Exec(`CREATE TABLE gen_output (key text, generation bigint, n bigint, PRIMARY KEY (key, generation, n))`); err != nil {
		t.Fatal(err)
	}
	e.addWork(40, "p")
	reached := make(chan struct{})
	gate := make(chan struct{})
	var once sync.Once
	var held int64 // the position the held batch starts at
	// The first batch from position 10 on is held (batch sizes may shrink
	// on a slow machine, so it need not start at exactly 10).
	p := &genProc{before: func(b *distributor.Batch) {
		if b.Checkpoint.Generation == 1 && b.Checkpoint.Position >= 10 {
			once.Do(func() { held = b.Checkpoint.Position; close(reached); <-gate })
		}
	}}
	ev := newEvents()
	cfg := fastConfig("w", ev)
	cfg.BatchSize = 5
	// Not UntilDone: a worker that keeps fencing batches may hold the
	// rewind off until it has caught up (a FOR KEY SHARE fence does not
	// queue behind a waiting FOR UPDATE), and one that exits once caught
	// up could leave before the rewind commits. The test waits for
	// generation 2's last checkpoint instead.
	e.start(cfg, p)

	select {
	case <-reached:
	case <-time.After(testutil.WaitTimeout(30 * time.Second)):
		t.Fatalf("no batch of generation 1 from position 10 on; events:\n%s", ev.dump())
	}
	done, rewound := rewindInBackground(e, partition.Rewind{Key: "p", Position: 5})
	waitForRewindLockWait(t, e)
	close(gate)
	var r []partition.Rewound
	select {
	case err := <-done:
		t.Fatal(err)
	case r = <-rewound:
	case <-time.After(testutil.WaitTimeout(30 * time.Second)):
		t.Fatal("the rewind did not commit")
	}
	ev.wait(t, time.Minute, "generation 2 checkpointed at position 40", func(e distributor.Event) bool {
		return e.Kind == distributor.EventCheckpoint && e.Key == "p" && e.Version > 1 && e.Position == 40
	})

	// The batch in flight (from held on) committed first; the worker may have
	// committed more of generation 1 before the rewind got the row (a
	// waiter for FOR UPDATE does not hold back the next batch's fence), but
	// generation 1 is then exactly what the rewind found.
	if len(r) != 1 || r[0].Generation != 2 || r[0].PreviousGeneration != 1 || r[0].PreviousPosition <= held {
		t.Fatalf("rewound %+v, want generation 2 after generation 1 past position %d", r, held)
	}
	for _, g := range []struct{ generation, from, to int64 }{{1, 1, r[0].PreviousPosition}, {2, 6, 40}} {
		var n, lo, hi int64
		if err := e.db.QueryRow(`SELECT count(*), coalesce(min(n), 0), coalesce(max(n), 0) FROM gen_output WHERE key = 'p' AND generation = ?`,
			g.generation).Scan(&n, &lo, &hi); err != nil {
			t.Fatal(err)
		}
		if n != g.to-g.from+1 || lo != g.from || hi != g.to {
			t.Errorf("generation %d: %d items %d..%d, want %d..%d", g.generation, n, lo, hi, g.from, g.to)
		}
	}
	var generation, position int64
	if err := e.db.QueryRow(`SELECT generation, position FROM baton.tasks WHERE partition_key = 'p'`).Scan(&generation, &position); err != nil {
		t.Fatal(err)
	}
	if generation != 2 || position != 40 {
		t.Errorf("task row at generation %d, position %d; want 2, 40", generation, position)
	}
	if t.Failed() {
		t.Log(ev.dump())
	}
}

// rewindInBackground rewinds in a transaction of its own, sending the
// outcome on done (an error) or rewound.
func rewindInBackground(e *env, rw ...partition.Rewind) (done chan error, rewound chan []partition.Rewound) {
	done, rewound = make(chan error, 1), make(chan []partition.Rewound, 1)
	s := partition.NewStore(e.db, "")
	go func() {
		tx, err := e.db.BeginTx(context.Background(), nil)
		if err == nil {
			var r []partition.Rewound
			if r, err = s.RewindTx(context.Background(), tx, rw); err == nil {
				if err = tx.Commit(); err == nil {
					rewound <- r
					return
				}
			}
			_ = tx.Rollback()
		}
		done <- err
	}()
	return done, rewound
}

// waitForRewindLockWait returns once a rewind waits for a row lock (a
// batch in flight holds it).
func waitForRewindLockWait(t *testing.T, e *env) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, "the rewind waiting for the batch in flight", func() error {
		var n int
		if err := e.db.QueryRow(`SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND strpos(query, '-- baton rewind') > 0`).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return errors.New("not waiting")
		}
		return nil
	})
}
