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
		Use: "demo",
		Example: `  worker demo
  worker demo --contracts 20 --records-per-contract 500 --kill-at 0.5
  DATABASE_URL=postgres://baton@db.example/postgres worker demo`,
		Short: "Show baton end to end: seed, three workers, one killed mid-run, takeover, exact verification",
		Long: `demo seeds synthetic contracts, starts worker processes, SIGKILLs one part-way
through, shows the takeover as it happens, and verifies every contract's
per-record nets against an independent recomputation.

Never touches the database named by DATABASE_URL (or --database-url):
with it set, the demo creates a database of its own on the same server
(the role needs CREATEDB), loads, prices and verifies there, and drops it
at the end, also when interrupted (SIGINT, SIGTERM). The jobs, records and
workers of the named database are left alone.

With DATABASE_URL unset it runs a private PostgreSQL from the locally
installed binaries, in --pg-dir (reused by later runs; --fresh starts over),
listening on 127.0.0.1 on a free port, stopped when the demo ends.

Writes files: the generated data and the workers' logs, in a temporary
directory removed at the end; without DATABASE_URL, the private server's
data in --pg-dir.`,
		Args: cobra.NoArgs,
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
		Use:     "demo",
		Short:   "Show scheduled jobs: workers run a 1-second catch-up job and a leader job through a SIGKILL and a SIGSTOP",
		Example: `  worker schedule demo`,
		Long: `demo adds two jobs, "tick" (every second, catch-up, lock mode) and "lead"
(every second, leader mode), starts worker processes, SIGKILLs the leader's
worker, then SIGSTOPs the new leader for three times the lease, and checks
the runs: every slot ran, a slot ran twice only when its first runner was
killed or stopped, and the leader job moved only when its worker died.

Never touches the database named by DATABASE_URL (or --database-url):
with it set, the demo creates a database of its own on the same server
(the role needs CREATEDB), adds its jobs and runs its workers there, and
drops it at the end, also when interrupted (SIGINT, SIGTERM). The jobs
(even ones named "tick" or "lead"), records and workers of the named
database are left alone. With DATABASE_URL unset it runs a private
PostgreSQL (see "worker demo").

Writes files: the jobs' output and the workers' logs, in a temporary
directory removed at the end; without DATABASE_URL, the private server's
data in --pg-dir.`,
		Args: cobra.NoArgs,
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
