package console_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/console"
	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/partition"
)

// A contract's page shows the generations the workload reports, newest
// first, with the reason and the change of the total from the generation
// before; the partition's own generation once it has been rewound. A
// workload that cannot read them makes the page an error, not a page
// without them.
func TestContractPageShowsGenerations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.Open(t, pgtest.NewURL(t), dbconn.Options{})
	store := partition.NewStore(pgtest.Handle(db), "")
	if _, err := store.AddWorks(ctx, []partition.Work{{Key: "acme", N: 4}, {Key: "other", N: 1}, {Key: "broken", N: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Rewind(ctx, []partition.Rewind{{Key: "acme"}}); err != nil {
		t.Fatal(err)
	}
	i64 := func(v int64) *int64 { return &v }
	started := time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)
	finished := started.Add(time.Minute)
	gens := func(_ context.Context, key string) ([]console.Generation, error) {
		switch key {
		case "acme":
			return []console.Generation{
				{Generation: 2, State: "current", StartedAt: started, FinishedAt: &finished, StartedBy: "ops@host",
					Reason: "tiers corrected", Items: i64(4), Total: i64(9_700)},
				{Generation: 1, State: "superseded", StartedAt: started.Add(-time.Hour), FinishedAt: &started,
					Reason: "first pricing", Items: i64(4), Total: i64(10_000)},
			}, nil
		case "other":
			return nil, nil
		}
		return nil, errors.New("the generations table is unreadable")
	}
	base := serve(t, db, console.Config{Noun: "contract", ItemUnit: "records", Generations: gens})

	code, body := get(t, base+"/contracts/acme")
	if code != http.StatusOK {
		t.Fatalf("contract page = %d\n%s", code, body)
	}
	table := body[strings.Index(body, `id="generations"`):]
	for _, want := range []string{`id="generation">2<`, "tiers corrected", "ops@host", `class="state current"`,
		`class="state superseded"`, `class="num gen-change">−300<`, "9,700"} {
		if !strings.Contains(body, want) {
			t.Errorf("the contract page lacks %q", want)
		}
	}
	if i, j := strings.Index(table, "tiers corrected"), strings.Index(table, "first pricing"); i < 0 || j < 0 || i > j {
		t.Errorf("generations not newest first:\n%s", table)
	}
	_, body = get(t, base+"/contracts/other")
	if strings.Contains(body, `id="generations"`) || strings.Contains(body, `id="generation"`) {
		t.Errorf("a contract never re-priced shows generations:\n%s", body)
	}
	if code, _ := get(t, base+"/contracts/broken"); code != http.StatusServiceUnavailable {
		t.Errorf("contract page whose generations cannot be read = %d, want 503", code)
	}
}
