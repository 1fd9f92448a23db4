// Package workerproc composes a worker process and runs its lifecycle: the
// distributor, the scheduled jobs beside it, the metrics server, the
// operator console and tracing, each a Component with one Start/Stop
// lifecycle, started in that order and stopped in reverse (the distributor
// first, tracing last so that the spans of the shutdown are flushed). The
// first component that fails to start stops the ones already started;
// every error names its component.
//
// A command builds a Config from its flags and calls Run; the workload
// (the Processor, the jobs a worker knows, the console's wording) comes in
// through the Config.
package workerproc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/batonhq/baton/backlog"
	"github.com/batonhq/baton/console"
	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/horizon"
	"github.com/batonhq/baton/internal/tracing"
	"github.com/batonhq/baton/metrics"
	"github.com/batonhq/baton/schedule"
	"github.com/batonhq/baton/schema"
)

// StopGrace is what Config.StopTimeout allows beyond two shutdown
// timeouts (the distributor's, then the jobs'): for the HTTP servers to
// close and the traces to be flushed.
const StopGrace = 15 * time.Second

// Config is a worker process.
type Config struct {
	// DB is the worker's connection pool. Required; Run does not close it.
	DB *dbconn.DB
	// Processor processes the partitions. Required.
	Processor distributor.Processor
	// Distributor configures the worker loop, with its own defaults.
	Distributor distributor.Config

	// Metrics, if set, counts the distributor's events and heartbeats,
	// the jobs' runs and the horizon. Default: a new metrics.Metrics when
	// MetricsAddr is set, none otherwise.
	Metrics *metrics.Metrics
	// MetricsAddr serves /metrics, /healthz and /readyz on this address;
	// off when empty.
	MetricsAddr string
	// Ready is the check of /readyz. Default: a ping of DB.
	Ready func(context.Context) error
	// HorizonWarnAfter is the metrics' threshold for a transaction holding
	// back the xmin horizon. Default: horizon.WarnAfterDefault.
	HorizonWarnAfter time.Duration
	// Backlog configures the backlog figures the metrics publish (package
	// backlog), sampled while Metrics is set. Its Schema defaults to the
	// distributor's.
	Backlog backlog.Config

	// Console, if set, is served over ConsoleDB (required with it: a
	// small pool of its own, so that viewers never take the worker's
	// connections; Run does not close it).
	Console   *console.Config
	ConsoleDB *dbconn.DB

	// Jobs, if set, runs the due scheduled jobs beside the distributor,
	// under its instance id and lease settings: it resolves a job's
	// definition to what runs it (schedule.Config.Resolve). Nil: no jobs.
	Jobs func(schedule.Definition) (schedule.RunFunc, bool)

	// TracingService, if set, installs OpenTelemetry tracing as the OTEL_*
	// environment variables say (off without them), under this service
	// name.
	TracingService string

	// StopTimeout bounds the stop of every component once the process is
	// stopping. Default: twice Distributor.ShutdownTimeout (the
	// distributor's graceful stop, then the jobs') plus StopGrace.
	StopTimeout time.Duration
	// Logger is every component's log. Defaults to slog.Default(). While
	// the distributor finds the database unreachable, what follows from
	// the outage is logged at DEBUG under one WARN line (and a reminder
	// every 30 s), and one INFO line says when it is back (outage.go).
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Metrics == nil && c.MetricsAddr != "" {
		c.Metrics = metrics.New()
	}
	if c.Ready == nil && c.DB != nil {
		db := c.DB
		c.Ready = func(ctx context.Context) error { return db.PingContext(ctx) }
	}
	c.HorizonWarnAfter = cmp.Or(c.HorizonWarnAfter, horizon.WarnAfterDefault)
	c.StopTimeout = cmp.Or(c.StopTimeout, 2*cmp.Or(c.Distributor.ShutdownTimeout, distributor.ShutdownTimeoutDefault)+StopGrace)
	outage := newOutageHandler(cmp.Or(c.Logger, slog.Default()).Handler())
	c.Logger = slog.New(outage)
	if c.Distributor.Logger == nil {
		c.Distributor.Logger = c.Logger
	} else {
		c.Distributor.Logger = slog.New(outage.over(c.Distributor.Logger.Handler()))
	}
	onEvent := c.Distributor.OnEvent
	c.Distributor.OnEvent = func(e distributor.Event) {
		outage.eventHook(e)
		if onEvent != nil {
			onEvent(e)
		}
	}
}

// validate rejects a Config Run cannot run (after defaults). The
// distributor's, console's and scheduler's own checks follow in New.
func (c *Config) validate() error {
	var errs []error
	if c.DB == nil {
		errs = append(errs, errors.New("no DB"))
	}
	if c.Processor == nil {
		errs = append(errs, errors.New("no Processor"))
	}
	if c.Console != nil && c.ConsoleDB == nil {
		errs = append(errs, errors.New("Console needs ConsoleDB"))
	}
	if c.StopTimeout < 0 || c.HorizonWarnAfter < 0 {
		errs = append(errs, fmt.Errorf("negative StopTimeout (%s) or HorizonWarnAfter (%s)", c.StopTimeout, c.HorizonWarnAfter))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid worker process configuration: %w", err)
	}
	return nil
}

// Process is a composed worker process, ready to Run.
type Process struct {
	cfg   Config
	d     *distributor.Distributor
	main  *Background // the distributor
	jobs  *Background // nil without jobs
	group Group
}

// New checks cfg and composes the process: it builds the distributor
// (instrumented by Metrics) and the scheduler; the servers bind their
// addresses when started.
func New(cfg Config) (*Process, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Metrics != nil {
		cfg.Metrics.Instrument(&cfg.Distributor)
	}
	d, err := distributor.New(cfg.DB, cfg.Processor, cfg.Distributor)
	if err != nil {
		return nil, err
	}
	p := &Process{cfg: cfg, d: d, main: NewBackground(d.Run)}
	p.group.StopTimeout = cfg.StopTimeout
	dc := cfg.Distributor // zero values take the scheduler's defaults, like the distributor's
	schemaName := cmp.Or(dc.Schema, schema.Default)
	if cfg.TracingService != "" {
		p.group.Add("tracing", tracingComponent(cfg.TracingService, cfg.Logger))
	}
	if cfg.Metrics != nil {
		m := cfg.Metrics
		m.Watch(d)
		m.WatchDB(cfg.DB)
		m.WatchHorizon(func(ctx context.Context) (horizon.Report, error) {
			return horizon.NewReader(cfg.DB, schemaName).Read(ctx, cfg.HorizonWarnAfter)
		})
		bc := cfg.Backlog
		bc.Schema = cmp.Or(bc.Schema, schemaName)
		pub, err := BacklogPublisher(cfg.DB, bc, m, cfg.Logger)
		if err != nil {
			return nil, err
		}
		p.group.Add("backlog", pub)
		if cfg.MetricsAddr != "" {
			p.group.Add("metrics", MetricsServer(cfg.MetricsAddr, m, cfg.Ready, cfg.Logger))
		}
	}
	if cfg.Console != nil {
		p.group.Add("console", Console(cfg.ConsoleDB, *cfg.Console, cfg.Logger))
	}
	if cfg.Jobs != nil {
		sc := schedule.Config{
			Schema: schemaName, InstanceID: d.InstanceID(), Heartbeat: dc.Heartbeat, StaleAfter: dc.StaleAfter,
			Confirm: dc.Confirm, PollInterval: dc.Heartbeat, ShutdownTimeout: dc.ShutdownTimeout,
			Logger: cfg.Logger, Resolve: cfg.Jobs,
		}
		if cfg.Metrics != nil {
			sc.OnRun = cfg.Metrics.OnJobRun
		}
		s, err := schedule.New(cfg.DB, sc)
		if err != nil {
			return nil, fmt.Errorf("scheduled jobs: %w", err)
		}
		p.jobs = NewBackground(s.Run)
		p.group.Add("jobs", p.jobs)
	}
	p.group.Add("distributor", p.main)
	return p, nil
}

// InstanceID is the distributor's instance id.
func (p *Process) InstanceID() string { return p.d.InstanceID() }

// StartError is Run's error when a component failed to start (the ones
// started before it were stopped).
type StartError struct{ Err error }

func (e *StartError) Error() string { return e.Err.Error() }
func (e *StartError) Unwrap() error { return e.Err }

// Run starts the components, runs until ctx is cancelled (a graceful
// stop: batches in flight commit, partitions are released), the
// distributor ends (Distributor.UntilDone, or an error), or the jobs end
// with an error, then stops every component in reverse order within
// StopTimeout. Its error joins the distributor's and the jobs' (each
// wrapped with its name) and those of the stop. A Process runs once.
func (p *Process) Run(ctx context.Context) error {
	if err := p.group.Start(ctx); err != nil {
		return &StartError{err}
	}
	var jobsDone <-chan struct{}
	if p.jobs != nil {
		jobsDone = p.jobs.Done()
	}
	select {
	case <-ctx.Done():
	case <-p.main.Done():
	case <-jobsDone:
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.StopTimeout)
	defer cancel()
	stopErr := p.group.Stop(sctx)
	var errs []error
	if err := p.main.Err(); err != nil {
		errs = append(errs, fmt.Errorf("distributor: %w", err))
	}
	if p.jobs != nil {
		if err := p.jobs.Err(); err != nil {
			errs = append(errs, fmt.Errorf("scheduled jobs: %w", err))
		}
	}
	return errors.Join(append(errs, stopErr)...)
}

// Run composes the process cfg describes and runs it (see Process.Run).
func Run(ctx context.Context, cfg Config) error {
	p, err := New(cfg)
	if err != nil {
		return err
	}
	return p.Run(ctx)
}

// tracingComponent installs tracing at start and flushes the spans still
// buffered at stop (a failed flush is logged, not an error of the stop).
func tracingComponent(service string, log *slog.Logger) Component {
	var shutdown func(context.Context) error
	return Funcs{
		StartFunc: func(ctx context.Context) error {
			var err error
			if shutdown, err = tracing.Setup(ctx, service); err != nil {
				return err
			}
			if tracing.Enabled() {
				log.Info("tracing on (OTEL_* environment)")
			}
			return nil
		},
		StopFunc: func(ctx context.Context) error {
			if err := shutdown(ctx); err != nil {
				log.Warn("could not flush traces", "error", err)
			}
			return nil
		},
	}
}

// MetricsServer is the Component serving m's /metrics, with /healthz and
// /readyz (ready is its check), on addr.
func MetricsServer(addr string, m *metrics.Metrics, ready func(context.Context) error, log *slog.Logger) Component {
	var srv *metrics.Server
	return Funcs{
		StartFunc: func(context.Context) error {
			var err error
			if srv, err = metrics.Listen(addr, m, ready, log); err != nil {
				return err
			}
			srv.Start()
			log.Info("serving metrics", "addr", srv.Addr())
			return nil
		},
		StopFunc: func(ctx context.Context) error { return within(ctx, srv.Stop) },
	}
}

// Console is the Component serving the operator console configured by cfg
// over db (which it does not close).
func Console(db *dbconn.DB, cfg console.Config, log *slog.Logger) Component {
	var srv *console.Server
	return Funcs{
		StartFunc: func(context.Context) error {
			var err error
			if srv, err = console.New(db, cfg); err != nil {
				return err
			}
			srv.Start()
			host, _, _ := net.SplitHostPort(srv.Addr())
			if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
				nouns := cmp.Or(cfg.Nouns, cmp.Or(cfg.Noun, "partition")+"s")
				log.Warn("the console listens beyond this machine: anyone who can reach it can read the "+nouns+"' state",
					"addr", srv.Addr())
			}
			log.Info("serving the console", "url", "http://"+srv.Addr()+"/", "actions", srv.ActionsEnabled())
			return nil
		},
		StopFunc: func(ctx context.Context) error { return within(ctx, srv.Stop) },
	}
}

// within runs stop and waits for it to return, or for ctx to end (stop
// then finishes in the background).
func within(ctx context.Context, stop func()) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		stop()
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("still stopping: %w", context.Cause(ctx))
	}
}
