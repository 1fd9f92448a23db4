package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/console"
	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/cliflags"
	"github.com/batonhq/baton/internal/pricingconsole"
	"github.com/batonhq/baton/workerproc"
)

// openConsole completes the console's configuration and opens its own
// small connection pool, so that viewers never take connections the
// worker needs; the caller closes it.
func openConsole(ctx context.Context, g *globals, c cliflags.Console, drainTarget time.Duration) (console.Config, *dbconn.DB, error) {
	cfg := pricingconsole.Config(g.schema, c.Addr, c.Token, c.HorizonWarnAfter, g.Logger)
	if err := cfg.Validate(); err != nil {
		return cfg, nil, usageError("%v", err)
	}
	db, err := g.open(ctx, dbconn.Options{ApplicationName: "baton-console", MaxOpenConns: 3}, true)
	if err != nil {
		return cfg, nil, err
	}
	pricingconsole.Complete(&cfg, db)
	cfg.DrainTarget = drainTarget
	return cfg, db, nil
}

func newUICmd(g *globals) *cobra.Command {
	var c cliflags.Console
	var drainTarget time.Duration
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Serve the operator console: contracts, their ownership history, workers (read-only unless --ui-token)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, db, err := openConsole(cmd.Context(), g, c, drainTarget)
			if err != nil {
				return err
			}
			defer db.Close()
			srv := workerproc.Console(db, cfg, g.Logger)
			if err := srv.Start(cmd.Context()); err != nil {
				return usageError("%v", err)
			}
			<-cmd.Context().Done()
			return srv.Stop(context.WithoutCancel(cmd.Context()))
		},
	}
	c.Register(cmd.Flags(), "addr", console.AddrDefault, "listen address (loopback by default)")
	cliflags.DrainTarget(cmd.Flags(), &drainTarget)
	return cmd
}
