package seed_test

import (
	"testing"

	"github.com/batonhq/baton/pricing/seed"
)

func TestSummary(t *testing.T) {
	t.Parallel()
	o := seed.Options{Contracts: 3, RecordsPerContract: 4, Seed: 7}
	if got, want := o.Summary("t.csv", "r.csv"), "wrote t.csv and r.csv (3 contracts × 4 records, seed 7)"; got != want {
		t.Errorf("uniform: %q, want %q", got, want)
	}
	var err error
	if o.Shape, err = seed.ParseShape("hot:0.5"); err != nil {
		t.Fatal(err)
	}
	if got, want := o.Summary("t.csv", "r.csv"), "wrote t.csv and r.csv (3 contracts, 12 records shaped hot:0.5, seed 7)"; got != want {
		t.Errorf("shaped: %q, want %q", got, want)
	}
}
