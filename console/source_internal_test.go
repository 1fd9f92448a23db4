package console

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/batonhq/baton/internal/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
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
	src := newSource(db, cfg)
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
	if second.Overview.Rate != 15 || second.Contracts[0].Rate != 15 || second.Contracts[1].Rate != 0 {
		t.Fatalf("rates %v, %v, %v; want 15 records/s overall and for a, 0 for b",
			second.Overview.Rate, second.Contracts[0].Rate, second.Contracts[1].Rate)
	}
	src.invalidate()
	if read() == second {
		t.Fatal("an invalidated snapshot was reused")
	}
}
