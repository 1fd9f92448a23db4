package pricer_test

import (
	"context"
	"testing"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/batchconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing/pricer"
	"github.com/batonhq/baton/pricing/rerate"
)

// splitOnly runs a worker that stops as soon as it has split a partition:
// batches of one record, so the segments it may start are far from
// caught up.
func splitOnly(t *testing.T, db *dbconn.DB) {
	t.Helper()
	ctx, split := context.WithCancel(context.Background())
	defer split()
	cfg := distributor.Config{Name: "splitter", Heartbeat: 100 * time.Millisecond, StaleAfter: 2 * time.Second,
		BatchSize: 1, SegmentRecords: 1, OnEvent: func(e distributor.Event) {
			if e.Kind == distributor.EventSplit {
				split()
			}
		}}
	runUntilDoneCtx(t, ctx, db, cfg)
	if ctx.Err() == nil {
		t.Fatal("the worker finished without splitting anything")
	}
}

// A held group priced member by member, because one member prices a
// preview whose batch reaches records loaded after the preview started
// (priced under the current generation too), holds the last batches of every segment of a contract being
// re-priced: each segment's checkpoint is written only after the group's
// processing returns, so each reads as behind to the others, and the
// contract still switches, in that group, because its caught-up members
// are looked at together.
func TestAGroupWithAPreviewSwitchesItsSegmentsTogether(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	ctx := context.Background()
	loadRecords(t, db, []string{"a", "p"}, map[string]int{"a": 3000, "p": 50}, "r")
	runUntilDone(t, db, distributor.Config{Name: "first", Heartbeat: 100 * time.Millisecond, StaleAfter: 2 * time.Second})
	if _, err := rerate.NewStore(db, "").Start(ctx, []rerate.Request{{Contract: "a", Reason: "re-price", StartedBy: "test"}}); err != nil {
		t.Fatal(err)
	}
	splitOnly(t, db)
	// The preview starts once the splitter has stopped, so that none of
	// it is priced yet.
	if _, err := rerate.NewStore(db, "").Start(ctx, []rerate.Request{{Contract: "p", Reason: "what if", StartedBy: "test", Preview: true}}); err != nil {
		t.Fatal(err)
	}
	loadRecords(t, db, nil, map[string]int{"p": 5}, "late")

	var keys []string
	if err := db.NewSelect().Table("baton.tasks").Column("partition_key").
		Where("segment_of = 'a' OR partition_key = 'p'").OrderExpr(`partition_key COLLATE "C"`).Scan(ctx, &keys); err != nil {
		t.Fatal(err)
	}
	if len(keys) < 3 || keys[len(keys)-1] != "p" {
		t.Fatalf("task rows %v, want segments of a, and p", keys)
	}
	leases := make([]partition.Lease, len(keys))
	for i, k := range keys {
		leases[i] = claimOne(t, db.DB, "w#1", k)
	}
	conn, tx, done := beginOnConn(t, db)
	defer done()
	store := taskstore.NewStore(db, "").Kind(pricer.Kind)
	g := &distributor.Group{Owner: "w#1", Tx: tx, Owned: true}
	for i, l := range leases {
		cp, err := store.Fence(ctx, tx, "w#1", l)
		if err != nil {
			t.Fatal(err)
		}
		b := &distributor.Batch{Kind: pricer.Kind, Lease: l, Owner: "w#1", Tx: tx, Checkpoint: cp,
			Limit: int(cp.Available - cp.Position), Partition: partition.PartitionOf(keys[i])}
		batchconn.Attach(b, conn)
		g.Batches = append(g.Batches, b)
	}
	results, err := pricer.NewStore(db, "").Processor().ProcessGroup(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range g.Batches {
		if results[i].Position != b.Checkpoint.Available {
			t.Fatalf("%s priced through %d, want its end %d", keys[i], results[i].Position, b.Checkpoint.Available)
		}
		if err := store.Advance(ctx, tx, b.Lease, b.Checkpoint.Position, results[i].Position, results[i].State); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var states []string
	if err := db.NewSelect().Table("baton.generations").ColumnExpr("contract_id || ' ' || generation || ' ' || state").
		Where("generation = 2").OrderExpr("contract_id").Scan(ctx, &states); err != nil {
		t.Fatal(err)
	}
	if len(states) != 2 || states[0] != "a 2 current" || states[1] != "p 2 preview" {
		t.Fatalf("generations after the group: %v, want a's current and p's a preview", states)
	}
	verifyClean(t, db)
}
