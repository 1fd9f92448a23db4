package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/backlog"
	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/clienv"
	"github.com/batonhq/baton/internal/cliflags"
	"github.com/batonhq/baton/internal/jobs"
	"github.com/batonhq/baton/metrics"
	"github.com/batonhq/baton/pricing/pricer"
	"github.com/batonhq/baton/workerproc"
)

// runFlags are the flags of "worker run".
type runFlags struct {
	cfg         distributor.Config
	metricsAddr string
	jobs        bool
	history     cliflags.History
	console     cliflags.Console
	waitForDB   time.Duration
	listenURL   string
	drainTarget time.Duration
}

func (r *runFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	cliflags.Distributor(f, &r.cfg)
	f.BoolVar(&r.jobs, "jobs", true, "also run due scheduled jobs (see \"worker schedule\"); --jobs=false opts out")
	f.StringVar(&r.listenURL, "listen-database-url", "", "direct PostgreSQL URL used only to LISTEN for new work, when --database-url goes through a transaction pooler (default $BATON_LISTEN_DATABASE_URL; without either, such workers poll)")
	f.StringVar(&r.metricsAddr, "metrics-addr", "", "serve /metrics, /healthz and /readyz on this address (e.g. 127.0.0.1:9090); off when empty")
	cliflags.DrainTarget(f, &r.drainTarget)
	r.history.Register(f)
	r.console.Register(f, "ui-addr", "", "also serve the operator console on this address (e.g. 127.0.0.1:8080); off when empty")
	f.DurationVar(&r.waitForDB, "wait-for-database", 5*time.Minute, "at start, how long to wait for the database to answer and register the worker, retrying with back-off (0: fail at once if it cannot connect)")
	cliflags.NonNegative(f, "wait-for-database")
}

func (r *runFlags) config(g *globals) (distributor.Config, error) {
	cfg := r.cfg
	cfg.Kind = pricer.Kind // the loader's partitions, and only those
	cfg.KeyAttr = "contract_id"
	cfg.Logger = g.Logger
	cfg.Schema = g.schema
	// A database that goes away while the worker registers is waited for
	// as long as one that is not there when it starts.
	cfg.StartTimeout = r.waitForDB
	r.history.Apply(&cfg)
	if err := cliflags.CheckDistributor(cfg); err != nil {
		return cfg, usageError("%v", err)
	}
	if err := cfg.Validate(); err != nil {
		// The checks above name the flags; this catches what they miss.
		return cfg, usageError("invalid worker configuration: %v", err)
	}
	return cfg, nil
}

func newRunCmd(g *globals) *cobra.Command {
	var r runFlags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run a pricing worker: claim contracts, price their records, hand them over on failure",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return r.run(cmd.Context(), g) },
	}
	r.register(cmd)
	cliflags.Grouped(cmd,
		cliflags.Group{Title: "Flags most runs need", Names: []string{"id", "until-done", "max-partitions", "metrics-addr", "log-format"}},
		cliflags.Group{Title: "Operating", Names: []string{"mode", "jobs", "ui-addr", "ui-token", "events", "event-retention",
			"wait-for-database", "shutdown-timeout", "listen-database-url", "poll-only"}},
		cliflags.Group{Title: "Tuning (the defaults suit most fleets)", Names: []string{"heartbeat", "stale-after", "confirm", "batch-size",
			"batch-target", "claim-group", "claim-group-records", "segment-records", "spread-takeovers", "max-attempts"}},
	)
	return cmd
}

// run is "worker run": the flags become a workerproc.Config, which runs
// the distributor with the pricing processor, its jobs, metrics, console
// and tracing.
func (r *runFlags) run(ctx context.Context, g *globals) error {
	cfg, err := r.config(g)
	if err != nil {
		return err
	}
	// A worker logs each batch not confirmed by the standby (event
	// not_replicated) and counts them in its metrics; its exit code stays
	// that of its run.
	g.OwnsDurability = true
	stmt, lock, idle := cfg.ConnectionLimits()
	db, err := g.OpenWaiting(ctx, dbconn.Options{
		ApplicationName: "baton-worker", StatementTimeout: stmt, LockTimeout: lock,
		IdleInTransactionTimeout: idle, MaxOpenConns: cfg.PoolSize() + 1 + jobs.Conns(r.jobs),
	}, r.waitForDB)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while waiting for the database: nothing held, a graceful stop
		}
		return err
	}
	defer db.Close()
	if r.listenURL == "" {
		r.listenURL = os.Getenv("BATON_LISTEN_DATABASE_URL")
	}
	if r.listenURL != "" {
		ldb, err := dbconn.Open(r.listenURL, dbconn.Options{ApplicationName: "baton-listen", MaxOpenConns: 2})
		if err != nil {
			return clienv.Exit(clienv.ExitUsage, fmt.Errorf("--listen-database-url: %w", err))
		}
		defer ldb.Close()
		cfg.ListenDB = ldb
	}
	pc := workerproc.Config{
		DB: db, Processor: pricer.NewStore(db, g.schema).Processor(), Distributor: cfg, MetricsAddr: r.metricsAddr,
		HorizonWarnAfter: r.console.HorizonWarnAfter, TracingService: "baton-worker", Logger: g.Logger,
		Backlog: backlog.Config{DrainTarget: r.drainTarget},
		Ready:   g.Ready(db),
	}
	if r.metricsAddr != "" {
		pc.Metrics = metrics.New()
	}
	if r.console.Addr != "" {
		ccfg, cdb, err := openConsole(ctx, g, r.console, r.drainTarget)
		if err != nil {
			return err
		}
		defer cdb.Close()
		pc.Console, pc.ConsoleDB = &ccfg, cdb
	}
	if r.jobs {
		pc.Jobs = jobs.Resolve(db, g.schema, g.Logger, pc.Metrics)
	}
	p, err := workerproc.New(pc)
	if err != nil {
		return usageError("%v", err)
	}
	start := time.Now()
	err = p.Run(ctx)
	switch {
	case errors.Is(err, distributor.ErrIncomplete):
		return pricer.Incomplete(context.WithoutCancel(ctx), db, g.schema, err)
	case errors.As(err, new(*workerproc.StartError)):
		return err // a server that could not start: a usage error (clienv)
	case err != nil:
		return fmt.Errorf("worker %s: %w", p.InstanceID(), err)
	}
	g.Logger.Info("worker exiting", "worker", p.InstanceID(), "elapsed_ms", time.Since(start).Milliseconds())
	return nil
}
