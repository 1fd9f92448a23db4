package distributor_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/partition"
)

// Shares are weighted by backlog: of two workers with room for eight
// partitions each, the one holding a partition with a million items
// pending has its share of the work, and claims none of sixty small
// partitions loaded then; the other prices them all. By count alone its
// share would be eight (ceil(61 / 2), capped), and it would take some.
func TestHotPartitionHolderClaimsNoSmallPartitions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ev := newEvents()
	var (
		mu      sync.Mutex
		holder  string
		blocked = make(chan struct{})
		release = make(chan struct{})
	)
	p := newProc()
	p.before = func(ctx context.Context, b *distributor.Batch) error {
		if b.Lease.Key != "hot" || b.Checkpoint.Position == 0 {
			return nil
		}
		// The hot partition's second batch waits: its worker holds it,
		// with nearly a million items pending, until the test ends.
		mu.Lock()
		first := holder == ""
		if first {
			holder = b.Owner
		}
		mu.Unlock()
		if first {
			close(blocked)
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	defer close(release)
	admin := partition.NewStore(e.db, "")
	for _, name := range []string{"a", "b"} {
		cfg := fastConfig(name, ev)
		// Long leases: a starved machine must not end the hot lease and
		// move the partition while the test looks at who holds it, nor
		// let the holder take work beyond its share as overflow (work
		// nobody else wants for a lease's length).
		cfg.Heartbeat, cfg.StaleAfter, cfg.MaxPartitions = 200*time.Millisecond, 20*time.Second, 8
		e.start(cfg, p)
	}
	testutil.Eventually(t, 20*time.Second, "both workers registered", func() error {
		_, workers, err := admin.Status(context.Background())
		if err != nil || len(workers) != 2 {
			return fmt.Errorf("workers %v, %v", workers, err)
		}
		return nil
	})
	e.addWork(1_000_000, "hot")
	testutil.Receive(t, blocked, 20*time.Second, "the hot partition's second batch")
	small := keys("small", 60)
	e.addWork(10, small...)
	testutil.Eventually(t, 30*time.Second, "the small partitions priced", func() error {
		var n int
		if err := e.db.QueryRow(`SELECT count(*) FROM test_output WHERE key LIKE 'small%'`).Scan(&n); err != nil || n != 600 {
			return fmt.Errorf("%d of 600 items, %v", n, err)
		}
		return nil
	})
	rows, err := e.db.Query(`SELECT key, owner FROM test_output WHERE key LIKE 'small%' AND owner = ? GROUP BY key, owner ORDER BY key`, holder)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var taken []string
	for rows.Next() {
		var k, o string
		if err := rows.Scan(&k, &o); err != nil {
			t.Fatal(err)
		}
		taken = append(taken, k)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(taken) > 0 {
		t.Errorf("%s, holding the hot partition, also priced %d small partitions: %v", holder, len(taken), taken)
	}
}
