package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	verifyGauges sync.Map // *Metrics → prometheus.Gauge
	jobRuns      sync.Map // *Metrics → *prometheus.CounterVec
)

// OnJobRun counts a scheduled job's run by job and outcome (ok, failed,
// lost, fenced, cancelled) in baton_job_runs_total (registered on first
// use); it fits schedule.Config.OnRun.
func (m *Metrics) OnJobRun(job, outcome string, _ time.Duration) {
	c, ok := jobRuns.Load(m)
	if !ok {
		vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "baton_job_runs_total",
			Help: "Scheduled job runs by this worker, by job and outcome: ok, failed, lost (lease ended first), fenced (completion refused), cancelled (shutdown)."},
			[]string{"job", "outcome"})
		var loaded bool
		if c, loaded = jobRuns.LoadOrStore(m, vec); !loaded {
			m.Registry.MustRegister(vec)
		}
	}
	c.(*prometheus.CounterVec).WithLabelValues(job, outcome).Inc()
}

// SetVerifyMismatches records the mismatches the built-in verify job found
// in its last run, as baton_verify_mismatches (registered on first use).
func (m *Metrics) SetVerifyMismatches(n int) {
	g, ok := verifyGauges.Load(m)
	if !ok {
		gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "baton_verify_mismatches",
			Help: "Contracts (and orphan priced rows) whose priced output or checkpoint disagreed with the independent SQL recomputation in the last verify run."})
		var loaded bool
		if g, loaded = verifyGauges.LoadOrStore(m, gauge); !loaded {
			m.Registry.MustRegister(gauge)
		}
	}
	g.(prometheus.Gauge).Set(float64(n))
}
