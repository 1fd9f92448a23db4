package main

import (
	"cmp"
	"context"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/batonhq/baton/console"
	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/horizon"
	"github.com/batonhq/baton/internal/cliflags"
	"github.com/batonhq/baton/pricing/pricer"
	"github.com/batonhq/baton/pricing/rerate"
	"github.com/batonhq/baton/workerproc"
)

// consoleFlags configure the operator console, served by "worker ui" or,
// with --ui-addr, by any "worker run".
type consoleFlags struct {
	addr  string
	token string
	// horizonWarnAfter is the horizon warning threshold (the console's
	// vacuum section; for worker run, its metrics' too).
	horizonWarnAfter time.Duration
}

func (c *consoleFlags) register(f *pflag.FlagSet, addrFlag, tokenFlag, addrDefault, addrHelp string) {
	f.StringVar(&c.addr, addrFlag, addrDefault, addrHelp)
	f.StringVar(&c.token, tokenFlag, "", "enable the console's actions (retry, trigger) behind this token, at least 8 characters; read-only without it. Prefer $"+console.TokenEnv+": other users can read a command line (ps)")
	f.DurationVar(&c.horizonWarnAfter, "horizon-warn-after", horizon.WarnAfterDefault, "warn when a transaction has held back the xmin horizon (and so vacuum) this long")
	cliflags.Positive(f, "horizon-warn-after")
}

// config completes the flags from the environment.
func (c *consoleFlags) config(g *globals) console.Config {
	return console.Config{Schema: g.schema, Addr: c.addr, Token: cmp.Or(c.token, os.Getenv(console.TokenEnv)), Logger: g.Logger, Noun: "contract", Nouns: "contracts", ItemUnit: "records", Kind: pricer.Kind, HorizonWarnAfter: c.horizonWarnAfter}
}

// open completes the console's configuration and opens its own small
// connection pool, so that viewers never take connections the worker
// needs; the caller closes it.
func (c *consoleFlags) open(ctx context.Context, g *globals) (console.Config, *dbconn.DB, error) {
	cfg := c.config(g)
	if err := cfg.Validate(); err != nil {
		return cfg, nil, usageError("%v", err)
	}
	db, err := g.open(ctx, dbconn.Options{ApplicationName: "baton-console", MaxOpenConns: 3}, true)
	if err != nil {
		return cfg, nil, err
	}
	// A contract whose checkpoint lies beyond its stored records is shown
	// as an error, as status shows it, never as done.
	cfg.Inconsistent = func(ctx context.Context) (map[string]string, error) {
		progress, err := pricer.NewStore(db, g.schema).CheckProgress(ctx)
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
		gens, err := rerate.NewStore(db, g.schema).List(ctx, []string{contract})
		if err != nil {
			return nil, err
		}
		out := make([]console.Generation, 0, len(gens))
		for i := len(gens) - 1; i >= 0; i-- { // newest first
			gen := gens[i]
			out = append(out, console.Generation{Generation: gen.Generation, State: gen.State, StartedAt: gen.StartedAt,
				FinishedAt: gen.FinishedAt, StartedBy: gen.StartedBy, Reason: gen.Reason, Items: &gen.Records, Total: &gen.NetTotal})
		}
		return out, nil
	}
	return cfg, db, nil
}

func newUICmd(g *globals) *cobra.Command {
	var c consoleFlags
	var drainTarget time.Duration
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Serve the operator console: contracts, their ownership history, workers (read-only unless --ui-token)",
		Long: `ui serves the operator console over HTTP: contracts, their ownership
history, the live workers and the scheduled jobs.

Without a token it only reads the database. Changes the database with a
token: its actions re-enable failed contracts (as "worker retry") and
trigger scheduled jobs (as "worker schedule trigger"). Give the token in
$` + console.TokenEnv + `, not with --ui-token: other users of the machine can
read a process's command line (ps), not its environment. The token is
never printed.`,
		Example: `  worker ui
  ` + console.TokenEnv + `="$(openssl rand -hex 16)" worker ui --addr 0.0.0.0:8080`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, db, err := c.open(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer db.Close()
			cfg.DrainTarget = drainTarget
			srv := workerproc.Console(db, cfg, g.Logger)
			if err := srv.Start(cmd.Context()); err != nil {
				return usageError("%v", err)
			}
			<-cmd.Context().Done()
			return srv.Stop(context.WithoutCancel(cmd.Context()))
		},
	}
	c.register(cmd.Flags(), "addr", "ui-token", console.AddrDefault, "listen address (loopback by default)")
	drainTargetFlag(cmd.Flags(), &drainTarget)
	return cmd
}
