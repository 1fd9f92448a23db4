package workerproc

import (
	"context"
	"log/slog"

	"github.com/batonhq/baton/dbconn"

	"github.com/batonhq/baton/backlog"
	"github.com/batonhq/baton/metrics"
)

// BacklogPublisher is the Component that samples the backlog figures of
// every kind from db on cfg.SampleEvery (see package backlog) and
// publishes them in m: its own interval, never the claim path. Every
// worker serving metrics runs one, so that each scrape target has the
// figures and no election is needed: the first in an interval scans the
// task table and stores a sample, the others publish that sample (see
// package backlog), so a fleet scans the table about once per interval.
func BacklogPublisher(db *dbconn.DB, cfg backlog.Config, m *metrics.Metrics, log *slog.Logger) (Component, error) {
	r, err := backlog.New(db, cfg)
	if err != nil {
		return nil, err
	}
	p := backlog.NewPublisher(r, log)
	m.WatchBacklog(p)
	return Funcs{
		StartFunc: func(ctx context.Context) error {
			p.Start(context.WithoutCancel(ctx))
			return nil
		},
		StopFunc: func(ctx context.Context) error { return within(ctx, p.Stop) },
	}, nil
}
