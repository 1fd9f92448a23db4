package metrics

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/batonhq/baton/backlog"
)

// WatchBacklog exposes, per kind, the backlog figures p last sampled
// (package backlog defines each exactly):
//
//   - baton_backlog_pending_items, baton_backlog_pending_partitions:
//     work not processed, quarantined rows left out;
//   - baton_backlog_quarantined_items, baton_backlog_quarantined_partitions;
//   - baton_paused_partitions, baton_backlog_paused_items: partitions an
//     operator paused and their items not processed, not in the pending
//     figures (BatonPausedTooLong watches the first);
//   - baton_backlog_lag_seconds: how long the longest-waiting partition
//     has had pending work;
//   - baton_backlog_rate_items_per_second: items processed per second
//     over the rate window (left out while unknown);
//   - baton_backlog_drain_seconds: pending items at that rate (+Inf while
//     work is pending and nothing is processed; left out while the rate
//     is unknown);
//   - baton_backlog_workers and baton_backlog_workers_needed: live
//     workers, and how many would drain the backlog within
//     baton_backlog_drain_target_seconds: the autoscaling signal;
//   - baton_backlog_sample_age_seconds: the age of the figures;
//   - baton_backlog_read_errors_total: samplings that failed.
func (m *Metrics) WatchBacklog(p *backlog.Publisher) {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"kind"}, nil)
	}
	m.Registry.MustRegister(&backlogCollector{
		p:              p,
		pendingItems:   desc("baton_backlog_pending_items", "Work items available and not processed, over task rows (partitions and segments) that are not quarantined."),
		pendingParts:   desc("baton_backlog_pending_partitions", "Partitions (with their segments) having a task row that is not quarantined with pending items."),
		quarItems:      desc("baton_backlog_quarantined_items", "Work items not processed on quarantined task rows (waiting for a retry)."),
		quarParts:      desc("baton_backlog_quarantined_partitions", "Partitions (with their segments) having a quarantined task row."),
		pausedParts:    desc("baton_paused_partitions", "Partitions paused by an operator (by name or with their kind), with pending work or not: never claimed until resumed."),
		pausedItems:    desc("baton_backlog_paused_items", "Work items not processed on paused task rows that are not quarantined: not in the pending figures."),
		lag:            desc("baton_backlog_lag_seconds", "Time since the pending partition waiting longest last had no pending work: an upper bound on the age of the oldest pending item (0 when none is pending)."),
		rate:           desc("baton_backlog_rate_items_per_second", "Work items processed per second over the rate window (about a minute), from samples of the task table's totals."),
		drain:          desc("baton_backlog_drain_seconds", "Pending items divided by the rate: the estimated time to drain the backlog (+Inf when work is pending and none is processed)."),
		target:         desc("baton_backlog_drain_target_seconds", "The drain target that baton_backlog_workers_needed is computed for."),
		workers:        desc("baton_backlog_workers", "Live workers of the kind."),
		needed:         desc("baton_backlog_workers_needed", "Workers that would drain the pending items within the drain target at the per-worker rate of the rate window (at least 1 while work is pending)."),
		age:            desc("baton_backlog_sample_age_seconds", "Age of the backlog figures published (they are read every sampling interval)."),
		readErrorsDesc: prometheus.NewDesc("baton_backlog_read_errors_total", "Readings of the backlog figures that failed.", nil, nil),
	})
}

type backlogCollector struct {
	p                                                                                   *backlog.Publisher
	pendingItems, pendingParts, quarItems, quarParts, lag, rate, drain, target, workers *prometheus.Desc
	needed, age, readErrorsDesc, pausedParts, pausedItems                               *prometheus.Desc
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.pendingItems, c.pendingParts, c.quarItems, c.quarParts, c.lag, c.rate,
		c.drain, c.target, c.workers, c.needed, c.age, c.readErrorsDesc, c.pausedParts, c.pausedItems} {
		ch <- d
	}
}

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.readErrorsDesc, prometheus.CounterValue, float64(c.p.Errors()))
	figs, at, _ := c.p.Latest()
	if at.IsZero() {
		return
	}
	age := time.Since(at).Seconds()
	gauge := func(d *prometheus.Desc, v float64, kind string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, kind)
	}
	for _, f := range figs {
		gauge(c.pendingItems, float64(f.PendingItems), f.Kind)
		gauge(c.pendingParts, float64(f.PendingPartitions), f.Kind)
		gauge(c.quarItems, float64(f.QuarantinedItems), f.Kind)
		gauge(c.quarParts, float64(f.QuarantinedPartitions), f.Kind)
		gauge(c.pausedParts, float64(f.PausedPartitions), f.Kind)
		gauge(c.pausedItems, float64(f.PausedItems), f.Kind)
		gauge(c.lag, f.Lag.Seconds(), f.Kind)
		if f.RateKnown {
			gauge(c.rate, f.Rate, f.Kind)
		}
		switch {
		case f.Drains:
			gauge(c.drain, f.DrainTime.Seconds(), f.Kind)
		case f.RateKnown:
			gauge(c.drain, math.Inf(1), f.Kind)
		}
		gauge(c.target, f.DrainTarget.Seconds(), f.Kind)
		gauge(c.workers, float64(f.Workers), f.Kind)
		gauge(c.needed, float64(f.WorkersNeeded), f.Kind)
		gauge(c.age, age, f.Kind)
	}
}
