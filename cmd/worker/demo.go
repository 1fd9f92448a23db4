package main

import (
	"github.com/spf13/cobra"

	"github.com/batonhq/baton/internal/cliflags"
	"github.com/batonhq/baton/internal/demo"
	"github.com/batonhq/baton/internal/pglocal"
	"github.com/batonhq/baton/internal/report/text"
)

func newDemoCmd(g *globals) *cobra.Command {
	var o demo.PricingOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Show baton end to end: seed, three workers, one killed mid-run, takeover, exact verification",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.View = text.NewDemoView(g.stdout)
			o.Config = g.demoConfig(o.Config)
			return demo.Pricing(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Contracts, "contracts", 60, "contracts to seed")
	f.IntVar(&o.RecordsPerContract, "records-per-contract", 2000, "records per contract")
	f.IntVar(&o.Workers, "workers", 3, "worker processes")
	f.Float64Var(&o.KillAt, "kill-at", 0.3, "fraction priced at which one worker is SIGKILLed, below 1 (0: no kill)")
	f.StringVar(&o.PGDir, "pg-dir", pglocal.DefaultDir(), "data directory of the private PostgreSQL (without DATABASE_URL)")
	f.BoolVar(&o.Fresh, "fresh", false, "delete --pg-dir first")
	f.Uint64Var(&o.Seed, "seed", 1, "seed for the synthetic data, any value")
	cliflags.Positive(f, "contracts", "records-per-contract", "workers")
	cliflags.NonNegative(f, "kill-at")
	cliflags.AnyValue(f, "seed")
	return cmd
}

func newScheduleDemoCmd(g *globals) *cobra.Command {
	var o demo.ScheduleOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Show scheduled jobs: workers run a 1-second catch-up job and a leader job through a SIGKILL and a SIGSTOP",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Config = g.demoConfig(o.Config)
			return demo.Schedule(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Workers, "workers", 3, "worker processes (at least 3)")
	cliflags.AtLeast(f, "workers", "3")
	f.StringVar(&o.PGDir, "pg-dir", pglocal.DefaultDir(), "data directory of the private PostgreSQL (without DATABASE_URL)")
	f.BoolVar(&o.Fresh, "fresh", false, "delete --pg-dir first")
	return cmd
}

// demoConfig completes a demo's options with the global flags.
func (g *globals) demoConfig(c demo.Config) demo.Config {
	c.DatabaseURL, c.Schema = g.DatabaseURL, g.SchemaConfig()
	c.Stdout, c.Stderr, c.Logger = g.stdout, g.stderr, g.Logger
	return c
}
