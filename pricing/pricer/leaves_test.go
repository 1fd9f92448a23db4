package pricer_test

import (
	"context"
	"testing"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/pricing/pricer"
)

// A contract priced in segments writes its rows between keys already in
// priced_rows_key, where PostgreSQL splits a full leaf in half and an
// ascending run never returns to the left half; the segments' batches copy
// their rows in two interleaved passes so that the second fills what the
// first left, whether a batch is written alone or in a group of the
// worker's held segments (most are, see distributor's held groups). The
// key's pages then hold about 190 rows each (its tuples are 32 bytes for a
// one-letter contract, 226 to a full page), where rows copied in order
// leave them about half full (114 a page). The committed-output check
// (VerifyCommitted) then reads the large split contract in one join.
func TestSegmentsLeaveTheKeysLeavesFull(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	cfg := distributor.Config{Name: "p", Heartbeat: 100 * time.Millisecond, StaleAfter: 2 * time.Second, BatchSize: 4096}
	// A contract after it, priced first and more than a leaf holds: every
	// row of a goes before the index's last leaf.
	loadRecords(t, db, []string{"z"}, map[string]int{"z": 2_000}, "z")
	runUntilDone(t, db, cfg)
	loadRecords(t, db, []string{"a"}, map[string]int{"a": 60_000}, "a")
	cfg.SegmentRecords = 10_000
	runUntilDone(t, db, cfg)
	if n := count(t, db, `SELECT count(DISTINCT partition_key) FROM baton.tasks WHERE segment_of = 'a'`); n < 2 {
		t.Fatalf("contract a was priced in %d segments, want it split", n)
	}
	rows := count(t, db, `SELECT count(*) FROM baton.priced_rows`)
	pages := count(t, db, `SELECT pg_relation_size('baton.priced_rows_key') / current_setting('block_size')::bigint`)
	if perPage := float64(rows) / float64(pages); perPage < 135 {
		t.Errorf("priced_rows_key holds %d rows in %d pages, %.0f a page; want at least 135 (leaves 60 %% full or more)", rows, pages, perPage)
	} else {
		t.Logf("priced_rows_key holds %d rows in %d pages, %.0f a page", rows, pages, perPage)
	}
	verifyClean(t, db)
	// The committed-output check reads the same large split contract. It
	// takes about a second; the limit only stops a plan that looks every
	// priced row's record up through the records view (quadratic: hours).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if m, err := pricer.NewStore(db, "").VerifyCommitted(ctx); err != nil {
		t.Fatalf("verifying the committed output of a contract priced in segments: %v", err)
	} else if len(m) != 0 {
		t.Fatalf("committed output: %v", m)
	}
}
