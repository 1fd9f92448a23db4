package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

var verifyGauges sync.Map // *Metrics → prometheus.Gauge

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
