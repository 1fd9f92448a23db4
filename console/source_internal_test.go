package console

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/partition"
)

// One snapshot serves every viewer for half a refresh interval; records/s
// is the progress between samples over the time between them; an action
// drops the cached snapshot.
func TestSnapshotSharingAndRates(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewURL(t), dbconn.Options{})
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `INSERT INTO baton.tasks (partition_key, available, position) VALUES ('a', 100, 0), ('b', 100, 0)`); err != nil {
		t.Fatal(err)
	}
	clk := clockwork.NewFakeClock()
	cfg := Config{Clock: clk, Refresh: 2 * time.Second}
	cfg.setDefaults()
	src := newSource(pgtest.Handle(db), cfg)
	read := func() *snapshot {
		t.Helper()
		s, err := src.read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	first := read()
	if again := read(); again != first {
		t.Fatal("a second read within half an interval read the database again")
	}
	if _, err := db.ExecContext(ctx, `UPDATE baton.tasks SET position = 30 WHERE partition_key = 'a'`); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Second)
	second := read()
	if second == first {
		t.Fatal("a read a full interval later reused the old snapshot")
	}
	if second.Overview.Rate != 15 || second.Parts[0].Rate != 15 || second.Parts[1].Rate != 0 {
		t.Fatalf("rates %v, %v, %v; want 15 records/s overall and for a, 0 for b",
			second.Overview.Rate, second.Parts[0].Rate, second.Parts[1].Rate)
	}
	src.invalidate()
	if read() == second {
		t.Fatal("an invalidated snapshot was reused")
	}
}

// A takeover's row and summary carry the takeover time of its claim's
// first batch; a takeover still confirming has none.
func TestTakeoversPairClaimsWithFirstBatches(t *testing.T) {
	d := 1600 * time.Millisecond
	hist := []partition.HistoryEntry{ // newest first
		{Kind: partition.EventTakeover, Version: 5, Worker: "c#3", PrevOwner: "b#2"},
		{Kind: partition.EventFirstBatch, Version: 3, Worker: "b#2", TakeoverTime: &d},
		{Kind: partition.EventTakeover, Version: 3, Worker: "b#2", PrevOwner: "a#1"},
		{Kind: partition.EventClaimed, Version: 1, Worker: "a#1"},
	}
	got := takeovers(hist)
	if len(got) != 2 || got[0].Time != nil || got[0].From != "b#2" || got[1].Time == nil || *got[1].Time != d ||
		got[1].From != "a#1" || got[1].To != "b#2" {
		t.Fatalf("takeovers %+v", got)
	}
	if hist[2].TakeoverTime == nil || *hist[2].TakeoverTime != d || hist[0].TakeoverTime != nil {
		t.Fatalf("takeover rows %+v %+v: want the first batch's time on the confirmed one only", hist[0], hist[2])
	}
}
