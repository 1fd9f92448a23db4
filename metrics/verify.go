package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// lazyMetrics are the metrics registered on first use, for the workers
// that run scheduled jobs or the verify job only.
type lazyMetrics struct {
	jobRunsOnce sync.Once
	jobRuns     *prometheus.CounterVec

	verifyOnce       sync.Once
	verifyMismatches prometheus.Gauge
}

// OnJobRun counts a scheduled job's run by job and outcome (ok, failed,
// lost, fenced, cancelled) in baton_job_runs_total (registered on first
// use); it fits schedule.Config.OnRun.
func (m *Metrics) OnJobRun(job, outcome string, _ time.Duration) {
	m.lazy.jobRunsOnce.Do(func() {
		m.lazy.jobRuns = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "baton_job_runs_total",
			Help: "Scheduled job runs by this worker, by job and outcome: ok, failed, lost (lease ended first), fenced (completion refused), cancelled (shutdown)."},
			[]string{"job", "outcome"})
		m.Registry.MustRegister(m.lazy.jobRuns)
	})
	m.lazy.jobRuns.WithLabelValues(job, outcome).Inc()
}

// SetVerifyMismatches records the mismatches the built-in verify job found
// in its last run, as baton_verify_mismatches (registered on first use).
func (m *Metrics) SetVerifyMismatches(n int) {
	m.lazy.verifyOnce.Do(func() {
		m.lazy.verifyMismatches = prometheus.NewGauge(prometheus.GaugeOpts{Name: "baton_verify_mismatches",
			Help: "Contracts (and orphan priced rows) whose priced output or checkpoint disagreed with the independent SQL recomputation in the last verify run."})
		m.Registry.MustRegister(m.lazy.verifyMismatches)
	})
	m.lazy.verifyMismatches.Set(float64(n))
}
