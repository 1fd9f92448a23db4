package distributor

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/taskstore"
)

// The tests leave no goroutine behind (the server is torn down first).
func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.WithServer(m)) }

// A claim that applied on the server but whose reply was lost is found by
// the re-read and adopted; a candidate someone else won is not.
func TestResolveClaimsAdoptsOnlyWhatThisWorkerWon(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `INSERT INTO baton.tasks (partition_key, available) VALUES ('mine', 5), ('theirs', 5)`); err != nil {
		t.Fatal(err)
	}
	d, err := New(db, ProcessorFunc(nil), Config{Name: "w", Heartbeat: 100 * time.Millisecond, StaleAfter: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	store := taskstore.NewStore(db, "")
	cands, err := store.Candidates(ctx, 10)
	if err != nil || len(cands) != 2 {
		t.Fatalf("candidates %v, %v", cands, err)
	}
	for _, c := range cands {
		owner := d.InstanceID()
		if c.Key == "theirs" {
			owner = "other#1"
		}
		// The claims apply; this worker never hears back.
		if _, err := store.Claim(ctx, owner, time.Minute, []taskstore.Candidate{c}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := d.resolveClaims(cands)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Key != "mine" || got[0].Version != 1 {
		t.Fatalf("resolved %+v, want only mine at version 1", got)
	}
}
