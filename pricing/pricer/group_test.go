package pricer_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/pricing/pricer"
)

// dumpOutcome is every priced row and every checkpoint, as text, for
// comparing two runs over the same data (the writer's instance id and the
// time are left out: they differ by run).
func dumpOutcome(t *testing.T, db *bun.DB) []string {
	t.Helper()
	rows, err := db.Query(`
		SELECT format('priced %s %s %s %s %s %s v%s', contract_id, seq, record_id, gross_minor, discount_minor, net_minor, claim_version)
		FROM baton.priced
		UNION ALL
		SELECT format('task %s v%s %s/%s %s', partition_key, version, position, available, checkpoint::text)
		FROM baton.tasks`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// largestClaimGroup is the most claims committed by one transaction.
func largestClaimGroup(t *testing.T, db *bun.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT coalesce(max(c), 0) FROM (
		SELECT count(*) AS c FROM baton.events WHERE kind = 'claimed' GROUP BY xmin::text) g`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The same data priced with contracts claimed in groups (several first
// batches in one transaction) and each alone gives identical priced rows
// and checkpoints, and the golden vectors, whether the groups' members
// catch up in their first batch or carry on as held partitions (a batch
// size smaller than the contracts).
func TestGroupPricingEqualsSinglePricing(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{1000, 40} {
		t.Run(fmt.Sprintf("batch%d", batch), func(t *testing.T) {
			t.Parallel()
			run := func(group int) (*bun.DB, []string) {
				db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
				loadVectors(t, db)
				runUntilDone(t, db, distributor.Config{Name: fmt.Sprintf("g%d", group), Heartbeat: 100 * time.Millisecond,
					StaleAfter: 2 * time.Second, BatchSize: batch, ClaimGroup: group, MaxPartitions: 16})
				assertGolden(t, exportBytes(t, db))
				verifyClean(t, db)
				return db.DB, dumpOutcome(t, db.DB)
			}
			gdb, grouped := run(16)
			sdb, single := run(1)
			if n := largestClaimGroup(t, gdb); n < 2 {
				t.Fatalf("largest group of claims in one transaction: %d; want several", n)
			}
			if n := largestClaimGroup(t, sdb); n != 1 {
				t.Fatalf("ClaimGroup 1 claimed %d partitions in one transaction; want each alone", n)
			}
			if !slices.Equal(grouped, single) {
				for i := range min(len(grouped), len(single)) {
					if grouped[i] != single[i] {
						t.Fatalf("grouped and single runs differ first at\n grouped %s\n single  %s", grouped[i], single[i])
					}
				}
				t.Fatalf("grouped run has %d rows, single %d", len(grouped), len(single))
			}
		})
	}
}

// A group with a contract whose tiers are invalid fails as a whole; each
// member is then priced on its own, so the bad contract alone is recorded
// as failed (and quarantined) and the others are priced once.
func TestGroupWithABadContractPricesTheOthers(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	loadVectors(t, db)
	// Break one contract's tiers behind the loader's back.
	if _, err := db.Exec(`DELETE FROM baton.tiers WHERE contract_id = 'implicit-zero-tier'`); err != nil {
		t.Fatal(err)
	}
	cfg := distributor.Config{Name: "bad", Heartbeat: 100 * time.Millisecond, StaleAfter: 2 * time.Second,
		MaxPartitions: 16, MaxAttempts: 1, UntilDone: true}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	d, err := distributor.New(db, pricer.NewStore(db, "").Processor(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := d.Run(ctx); !errors.Is(err, distributor.ErrIncomplete) {
		t.Fatalf("run ended with %v; want %v", err, distributor.ErrIncomplete)
	}
	var failed []string
	rows, err := db.Query(`SELECT partition_key || ': ' || last_error FROM baton.tasks WHERE failed_at IS NOT NULL`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		failed = append(failed, s)
	}
	if len(failed) != 1 || !strings.HasPrefix(failed[0], "implicit-zero-tier: ") || !strings.Contains(failed[0], "no tiers") {
		t.Fatalf("quarantined %q; want only implicit-zero-tier, for its missing tiers", failed)
	}
	var left, dup int
	if err := db.QueryRow(`SELECT count(*) FROM baton.tasks WHERE position < available AND failed_at IS NULL`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d contracts left unpriced", left)
	}
	if err := db.QueryRow(`SELECT count(*) FROM baton.events WHERE kind = 'claimed' AND partition_key <> 'implicit-zero-tier'
		GROUP BY partition_key HAVING count(*) > 1`).Scan(&dup); err == nil {
		t.Fatalf("a good contract was claimed more than once")
	}
}

// heldGroups is the pricer, noting the groups of held contracts (batches
// past a claim's first, several contracts to a transaction) it prices.
type heldGroups struct {
	*pricer.Processor
	mu                sync.Mutex
	groups, resumed   int
	segments, largest int
}

func (p *heldGroups) ProcessGroup(ctx context.Context, g *distributor.Group) ([]distributor.Result, error) {
	if g.Owned {
		p.mu.Lock()
		p.groups++
		p.largest = max(p.largest, len(g.Batches))
		for _, b := range g.Batches {
			if b.Checkpoint.Position > 0 {
				p.resumed++
			}
			if b.Partition != b.Lease.Key {
				p.segments++
			}
		}
		p.mu.Unlock()
	}
	return p.Processor.ProcessGroup(ctx, g)
}

// The batches of contracts a worker holds, priced several to a
// transaction (ProcessGroup with members resuming from their checkpoints,
// segments among them), give the golden vectors byte for byte.
func TestHeldGroupsPriceTheGoldenVectors(t *testing.T) {
	t.Parallel()
	for _, seg := range []int64{0, 1} {
		t.Run(fmt.Sprintf("segments%d", seg), func(t *testing.T) {
			t.Parallel()
			db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{MaxOpenConns: 40})
			loadVectors(t, db)
			p := &heldGroups{Processor: pricer.NewStore(db, "").Processor()}
			cfg := distributor.Config{Name: "held", Heartbeat: 100 * time.Millisecond, StaleAfter: 2 * time.Second,
				BatchSize: 40, MaxPartitions: 32, ClaimGroup: 16, SegmentRecords: seg, UntilDone: true,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
			d, err := distributor.New(db, p, cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := d.Run(ctx); err != nil {
				t.Fatal(err)
			}
			assertGolden(t, exportBytes(t, db))
			s := verifyClean(t, db)
			if s.Records != 3544 || s.Priced != 3544 {
				t.Fatalf("verified %d records, %d priced; want 3544", s.Records, s.Priced)
			}
			if p.largest < 2 || p.resumed == 0 {
				t.Fatalf("held groups: %d, largest %d, %d members resumed; want several contracts to a transaction",
					p.groups, p.largest, p.resumed)
			}
			if seg > 0 && p.segments == 0 {
				t.Fatalf("no segment was priced in a held group (%d groups)", p.groups)
			}
			t.Logf("%d held groups, largest %d, %d members past 0, %d segments", p.groups, p.largest, p.resumed, p.segments)
		})
	}
}
