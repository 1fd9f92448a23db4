package distributor_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/distributor"
)

// outsideProc is the test processor (with groups when grouped) returning,
// for the partitions bad names, a position outside (position, available]
// after writing its output: no progress for a claim's first batch, past
// the available count for a held partition's later batch.
type outsideProc struct {
	*proc
	bad func(b *distributor.Batch) (int64, bool)
}

func (p *outsideProc) Process(ctx context.Context, b *distributor.Batch) (distributor.Result, error) {
	res, err := p.proc.Process(ctx, b)
	if pos, bad := p.bad(b); err == nil && bad {
		res.Position = pos
	}
	return res, err
}

type outsideGroupProc struct{ *outsideProc }

func (p outsideGroupProc) ProcessGroup(ctx context.Context, g *distributor.Group) ([]distributor.Result, error) {
	out := make([]distributor.Result, len(g.Batches))
	for i, b := range g.Batches {
		res, err := p.Process(ctx, b)
		if err != nil {
			return nil, err
		}
		out[i] = res
	}
	return out, nil
}

// A processor's position outside (position, available] is a failure of
// the partition that returned it, whichever transaction its batch ran in
// (a claim's first batch alone or in a group, a held partition's batch
// alone or in a group): nothing of that batch commits, the partition is
// failed (here quarantined at once) at its last committed checkpoint, and
// every other partition is processed exactly once.
func TestPositionOutsideTheBatchFailsOnlyItsPartition(t *testing.T) {
	for _, grouped := range []bool{false, true} {
		name := "alone"
		if grouped {
			name = "grouped"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			fresh := keys("c", 4) // one item each: claimed with their only batch
			held := keys("r", 4)  // more than one batch each
			e.addWork(1, fresh...)
			e.addWork(30, held...)
			op := &outsideProc{proc: newProc(), bad: func(b *distributor.Batch) (int64, bool) {
				cp := b.Checkpoint
				switch {
				case b.Lease.Key == "c001":
					return cp.Position, true // no progress
				case b.Lease.Key == "r002" && cp.Position >= 10:
					return cp.Available + 1, true // past the work
				}
				return 0, false
			}}
			var p distributor.Processor = op
			if grouped {
				p = outsideGroupProc{op}
			}
			ev := newEvents()
			cfg := groupConfig("w", ev)
			cfg.MaxAttempts = 1
			d := e.start(cfg, p)
			if err := waitDone(t, d, 60*time.Second); !errors.Is(err, distributor.ErrIncomplete) {
				t.Fatalf("run ended with %v; want %v\n%s", err, distributor.ErrIncomplete, ev.dump())
			}
			rows, err := e.db.Query(`SELECT t.partition_key, t.position, t.failed_at IS NOT NULL, coalesce(t.last_error, ''),
				(SELECT count(*) FROM test_output o WHERE o.key = t.partition_key),
				(SELECT coalesce(max(n), 0) FROM test_output o WHERE o.key = t.partition_key)
				FROM baton.tasks t ORDER BY t.partition_key`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			seen := 0
			for rows.Next() {
				var key, lastErr string
				var pos, outputs, last int64
				var failed bool
				if err := rows.Scan(&key, &pos, &failed, &lastErr, &outputs, &last); err != nil {
					t.Fatal(err)
				}
				seen++
				switch key {
				case "c001":
					if !failed || pos != 0 || outputs != 0 || !strings.Contains(lastErr, "outside") {
						t.Fatalf("c001: failed %v at %d with %d outputs (%q); want failed at 0 with none, position outside\n%s",
							failed, pos, outputs, lastErr, ev.dump())
					}
				case "r002":
					if !failed || pos < 10 || pos >= 30 || outputs != pos || last != pos || !strings.Contains(lastErr, "outside") {
						t.Fatalf("r002: failed %v at %d with %d outputs up to %d (%q); want failed at its last checkpoint "+
							"in [10, 30) with exactly its outputs, position outside\n%s", failed, pos, outputs, last, lastErr, ev.dump())
					}
				default:
					want := int64(30)
					if strings.HasPrefix(key, "c") {
						want = 1
					}
					if failed || pos != want || outputs != want || last != want {
						t.Fatalf("%s: failed %v at %d with %d outputs up to %d; want done at %d, each item once",
							key, failed, pos, outputs, last, want)
					}
				}
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if seen != 8 {
				t.Fatalf("%d partitions; want 8", seen)
			}
			if n := ev.count(kind(distributor.EventQuarantined)); n != 2 {
				t.Fatalf("%d quarantine events, want 2:\n%s", n, ev.dump())
			}
		})
	}
}
