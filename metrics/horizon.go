package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/batonhq/baton/horizon"
)

// HorizonMaxAge is how long a reading of the horizon serves scrapes before
// the next scrape reads it again, so that many scrapers cost the database
// at most one reading per worker every few seconds.
const HorizonMaxAge = 5 * time.Second

// horizonTimeout bounds one reading at a scrape.
const horizonTimeout = 2 * time.Second

// WatchHorizon exposes what read returns (horizon.Reader.Read over the worker's
// database and schema), read at scrape time at most every HorizonMaxAge:
//
//   - baton_xmin_horizon_age_seconds: the age of the oldest transaction
//     holding back the xmin horizon (0 when none does), the number to
//     alert on;
//   - baton_xmin_horizon_xids: how many transaction ids back the oldest
//     holder (slots included) keeps it;
//   - baton_xmin_horizon_warning (1 or 0) and
//     baton_xmin_horizon_warn_after_seconds: the threshold's verdict and
//     the threshold;
//   - baton_table_dead_rows{table}, baton_table_live_rows{table}: row
//     versions of the schema's tables, from pg_stat_user_tables;
//   - baton_xmin_horizon_read_errors_total: readings that failed (the
//     gauges are then left out of that scrape).
func (m *Metrics) WatchHorizon(read func(ctx context.Context) (horizon.Report, error)) {
	c := &horizonCollector{
		read:    read,
		age:     prometheus.NewDesc("baton_xmin_horizon_age_seconds", "Age of the oldest transaction holding back the xmin horizon (any database on the server; 0 when none): dead row versions younger than it cannot be vacuumed.", nil, nil),
		xids:    prometheus.NewDesc("baton_xmin_horizon_xids", "Transaction ids between now and the oldest xmin held back by a session, replication slot or prepared transaction.", nil, nil),
		warning: prometheus.NewDesc("baton_xmin_horizon_warning", "1 when the oldest transaction holding the horizon is past the warning threshold, or an inactive replication slot holds it.", nil, nil),
		after:   prometheus.NewDesc("baton_xmin_horizon_warn_after_seconds", "The horizon warning threshold.", nil, nil),
		dead:    prometheus.NewDesc("baton_table_dead_rows", "Dead row versions of a table of baton's schema (pg_stat_user_tables.n_dead_tup).", []string{"table"}, nil),
		live:    prometheus.NewDesc("baton_table_live_rows", "Live rows of a table of baton's schema (pg_stat_user_tables.n_live_tup).", []string{"table"}, nil),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "baton_xmin_horizon_read_errors_total",
			Help: "Readings of the xmin horizon and dead row versions that failed at a scrape."}),
	}
	// The error count is part of the collector, not registered apart: the
	// registry gathers collectors concurrently, and a counter of its own
	// could be read before the failed reading that this scrape counts.
	m.Registry.MustRegister(c)
}

type horizonCollector struct {
	read                                  func(ctx context.Context) (horizon.Report, error)
	age, xids, warning, after, dead, live *prometheus.Desc
	errors                                prometheus.Counter

	mu     sync.Mutex
	last   horizon.Report
	lastAt time.Time
}

func (c *horizonCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.age, c.xids, c.warning, c.after, c.dead, c.live} {
		ch <- d
	}
	c.errors.Describe(ch)
}

func (c *horizonCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.errors.Collect(ch)
	if c.lastAt.IsZero() || time.Since(c.lastAt) >= HorizonMaxAge {
		ctx, cancel := context.WithTimeout(context.Background(), horizonTimeout)
		r, err := c.read(ctx)
		cancel()
		if err != nil {
			c.errors.Inc()
			return
		}
		c.last, c.lastAt = r, time.Now()
	}
	r := c.last
	var xids int64
	for _, h := range r.Holders {
		xids = max(xids, h.XIDAge)
	}
	warning := 0.0
	if r.Warning {
		warning = 1
	}
	ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, r.OldestAge().Seconds())
	ch <- prometheus.MustNewConstMetric(c.xids, prometheus.GaugeValue, float64(xids))
	ch <- prometheus.MustNewConstMetric(c.warning, prometheus.GaugeValue, warning)
	ch <- prometheus.MustNewConstMetric(c.after, prometheus.GaugeValue, r.WarnAfter.Seconds())
	for _, t := range r.Tables {
		ch <- prometheus.MustNewConstMetric(c.dead, prometheus.GaugeValue, float64(t.Dead), t.Name)
		ch <- prometheus.MustNewConstMetric(c.live, prometheus.GaugeValue, float64(t.Live), t.Name)
	}
}
