package workerproc

import (
	"context"
	"log/slog"
	"time"

	"github.com/batonhq/baton/backlog"
	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/horizon"
	"github.com/batonhq/baton/metrics"
)

// SignalsConfig is a signals process: the fleet's backlog figures and the
// xmin horizon served as metrics without pricing, so that they exist while
// no worker runs (an autoscaler scaling a fleet to zero needs the signal
// that starts the first worker).
type SignalsConfig struct {
	DB *dbconn.DB
	// Backlog configures the readings (schema, drain target, sampling);
	// like the workers', a process stores a sample at most every
	// SampleEvery, whoever is first.
	Backlog backlog.Config
	// HorizonWarnAfter is the horizon warning threshold.
	HorizonWarnAfter time.Duration
	// MetricsAddr is where /metrics, /healthz and /readyz are served.
	MetricsAddr string
	// Ready is the readiness check of /readyz.
	Ready  func(context.Context) error
	Logger *slog.Logger
}

// Signals is a signals process (SignalsConfig).
type Signals struct{ group Group }

// NewSignals returns a signals process, or the error of an impossible
// backlog configuration.
func NewSignals(cfg SignalsConfig) (*Signals, error) {
	m := metrics.New()
	m.WatchHorizon(func(ctx context.Context) (horizon.Report, error) {
		return horizon.NewReader(cfg.DB, cfg.Backlog.Schema).Read(ctx, cfg.HorizonWarnAfter)
	})
	pub, err := BacklogPublisher(cfg.DB, cfg.Backlog, m, cfg.Logger)
	if err != nil {
		return nil, err
	}
	s := &Signals{}
	s.group.Add("backlog", pub)
	s.group.Add("metrics", MetricsServer(cfg.MetricsAddr, m, cfg.Ready, cfg.Logger))
	return s, nil
}

// Run serves until ctx is cancelled, then stops within StopGrace. A
// component that cannot start (the address is taken) fails it at once.
func (s *Signals) Run(ctx context.Context) error {
	if err := s.group.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), StopGrace)
	defer cancel()
	return s.group.Stop(sctx)
}
