package pricer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing/pricer"
)

// Prune reports a load named but not present as not found; with none
// named, it finds nothing to prune in an empty farm.
func TestPrune(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := pricer.NewStore(pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{}), "")
	r, err := store.Prune(ctx, pricer.PruneConfig{DryRun: true}, []int64{99}, 0)
	if err != nil || len(r.Loads) != 1 || r.Loads[0].Outcome != pricer.PruneNotFound || !r.DryRun ||
		!errors.Is(r.Err(), partition.ErrNotFound) {
		t.Fatalf("named load 99: %+v, %v", r, err)
	}
	if r, err := store.Prune(ctx, pricer.PruneConfig{}, nil, time.Hour); err != nil || len(r.Loads) != 0 || r.Err() != nil {
		t.Fatalf("older than an hour: %+v, %v", r, err)
	}
}
