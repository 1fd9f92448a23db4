package pricingconsole

import (
	"context"
	"testing"

	"github.com/batonhq/baton/console"
	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/pricing/pricer"
	"github.com/batonhq/baton/pricing/pricingschema"
	"github.com/batonhq/baton/pricing/rerate"
)

func TestMain(m *testing.M) { pgtest.Main(m, pricingschema.Set) }

// The console speaks of contracts of kind pricing, takes the token from
// the environment when no flag gives it, and lists generations newest
// first.
func TestConfigAndGenerations(t *testing.T) {
	t.Setenv(console.TokenEnv, "from-the-environment")
	cfg := Config("baton", "127.0.0.1:0", "", 0, nil)
	if cfg.Kind != pricer.Kind || cfg.Noun != "contract" || cfg.Token != "from-the-environment" {
		t.Errorf("Config = %+v", cfg)
	}
	if cfg := Config("baton", "", "flag-token", 0, nil); cfg.Token != "flag-token" {
		t.Errorf("a token given is overridden by the environment: %q", cfg.Token)
	}
	got := generations([]rerate.Generation{{Generation: 1, NetTotal: 100}, {Generation: 2, NetTotal: 90}})
	if len(got) != 2 || got[0].Generation != 2 || *got[0].Total != 90 || *got[1].Total != 100 {
		t.Errorf("generations = %+v", got)
	}
}

// On a database, a fresh farm has no inconsistent contract and an unknown
// contract no generations.
func TestCompleteReads(t *testing.T) {
	t.Parallel()
	db, err := dbconn.Open(pgtest.NewURL(t), dbconn.Options{MaxOpenConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cfg := Config("baton", "", "", 0, nil)
	Complete(&cfg, db)
	ctx := context.Background()
	if bad, err := cfg.Inconsistent(ctx); err != nil || len(bad) != 0 {
		t.Errorf("Inconsistent = %v, %v", bad, err)
	}
	if gens, err := cfg.Generations(ctx, "nosuch"); err != nil || len(gens) != 0 {
		t.Errorf("Generations = %v, %v", gens, err)
	}
}
