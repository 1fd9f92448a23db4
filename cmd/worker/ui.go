package main

import (
	"cmp"
	"context"
	"net"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/batonhq/baton/console"
	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/horizon"
	"github.com/batonhq/baton/pricing/pricer"
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
	positive(f, "horizon-warn-after")
}

// config completes the flags from the environment.
func (c *consoleFlags) config(g *globals) console.Config {
	return console.Config{Schema: g.schema, Addr: c.addr, Token: cmp.Or(c.token, os.Getenv(console.TokenEnv)), Logger: g.logger, Noun: "contract", Nouns: "contracts", ItemUnit: "records", Kind: pricer.Kind, HorizonWarnAfter: c.horizonWarnAfter}
}

// start serves the console over its own small connection pool, so that
// viewers never take connections the worker needs. It returns a stop
// function.
func (c *consoleFlags) start(ctx context.Context, g *globals) (func(), error) {
	cfg := c.config(g)
	if err := cfg.Validate(); err != nil {
		return nil, usageError("%v", err)
	}
	db, err := g.open(ctx, dbconn.Options{ApplicationName: "baton-console", MaxOpenConns: 3}, true)
	if err != nil {
		return nil, err
	}
	// A contract whose checkpoint lies beyond its stored records is shown
	// as an error, as status shows it, never as done.
	cfg.Inconsistent = func(ctx context.Context) (map[string]string, error) {
		progress, err := pricer.CheckProgress(ctx, db, g.schema)
		if err != nil {
			return nil, err
		}
		bad := make(map[string]string, len(progress.Inconsistent))
		for _, c := range progress.Inconsistent {
			bad[c.ContractID] = c.Problem()
		}
		return bad, nil
	}
	srv, err := console.New(db.DB, cfg)
	if err != nil {
		db.Close()
		return nil, usageError("%v", err)
	}
	srv.Start()
	host, _, _ := net.SplitHostPort(srv.Addr())
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		g.logger.Warn("the console listens beyond this machine: anyone who can reach it can read the contracts' state",
			"addr", srv.Addr())
	}
	g.logger.Info("serving the console", "url", "http://"+srv.Addr()+"/", "actions", srv.ActionsEnabled())
	return func() { srv.Stop(); db.Close() }, nil
}

func newUICmd(g *globals) *cobra.Command {
	var c consoleFlags
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
			stop, err := c.start(cmd.Context(), g)
			if err != nil {
				return err
			}
			<-cmd.Context().Done()
			stop()
			return nil
		},
	}
	c.register(cmd.Flags(), "addr", "ui-token", console.AddrDefault, "listen address (loopback by default)")
	return cmd
}
