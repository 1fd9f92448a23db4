// Package pricingconsole is the pricing workload as the operator console
// shows it: its nouns and kind, a contract whose checkpoint lies beyond its
// stored records shown as an error, a re-priced contract's generations and
// the previews waiting for a decision.
package pricingconsole

import (
	"cmp"
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/batonhq/baton/console"
	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/pricing/pricer"
	"github.com/batonhq/baton/pricing/rerate"
)

// Config is the console's configuration for the pricing tables of schema
// schemaName: addr, token (else $BATON_UI_TOKEN) and the horizon warning
// as given. Complete adds what needs the console's database.
func Config(schemaName, addr, token string, horizonWarnAfter time.Duration, logger *slog.Logger) console.Config {
	return console.Config{Schema: schemaName, Addr: addr, Token: cmp.Or(token, os.Getenv(console.TokenEnv)), Logger: logger,
		Noun: "contract", Nouns: "contracts", ItemUnit: "records", Kind: pricer.Kind, HorizonWarnAfter: horizonWarnAfter}
}

// Complete adds to cfg the pricing reads the console makes on db.
func Complete(cfg *console.Config, db *dbconn.DB) {
	// A contract whose checkpoint lies beyond its stored records is shown
	// as an error, as status shows it, never as done.
	cfg.Inconsistent = func(ctx context.Context) (map[string]string, error) {
		progress, err := pricer.NewStore(db, cfg.Schema).CheckProgress(ctx)
		if err != nil {
			return nil, err
		}
		bad := make(map[string]string, len(progress.Inconsistent))
		for _, c := range progress.Inconsistent {
			bad[c.ContractID] = c.Problem()
		}
		return bad, nil
	}
	// A re-priced contract's page lists its generations: who re-priced
	// it, why, and how its net total changed.
	cfg.Generations = func(ctx context.Context, contract string) ([]console.Generation, error) {
		gens, err := rerate.NewStore(db, cfg.Schema).List(ctx, []string{contract})
		if err != nil {
			return nil, err
		}
		return generations(gens), nil
	}
	// The overview lists the previews waiting for a decision, with the
	// change of their net totals.
	cfg.Previews = func(ctx context.Context) ([]console.Preview, error) {
		previews, err := rerate.NewStore(db, cfg.Schema).Previews(ctx, nil)
		out := make([]console.Preview, len(previews))
		for i, p := range previews {
			out[i] = console.Preview{Key: p.Contract, Generation: p.Generation, CaughtUp: p.CaughtUp, Total: p.NetTotal, Change: p.NetChange}
		}
		return out, err
	}
}

// generations are gens as the console lists them, newest first.
func generations(gens []rerate.Generation) []console.Generation {
	out := make([]console.Generation, 0, len(gens))
	for i := len(gens) - 1; i >= 0; i-- {
		gen := gens[i]
		out = append(out, console.Generation{Generation: gen.Generation, State: gen.State, StartedAt: gen.StartedAt,
			FinishedAt: gen.FinishedAt, StartedBy: gen.StartedBy, Reason: gen.Reason, Items: &gen.Records, Total: &gen.NetTotal})
	}
	return out
}
