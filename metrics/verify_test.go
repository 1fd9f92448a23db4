package metrics

import "testing"

func TestJobRunAndVerifyMetrics(t *testing.T) {
	m := New()
	m.OnJobRun("verify", "failed", 0)
	m.OnJobRun("verify", "failed", 0)
	m.OnJobRun("tick", "ok", 0)
	m.SetVerifyMismatches(3)
	m.SetVerifyMismatches(2)
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, mt := range f.GetMetric() {
			key := f.GetName()
			for _, l := range mt.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			if c := mt.GetCounter(); c != nil {
				got[key] = c.GetValue()
			}
			if g := mt.GetGauge(); g != nil {
				got[key] = g.GetValue()
			}
		}
	}
	for key, want := range map[string]float64{
		"baton_verify_mismatches":                        2,
		"baton_job_runs_total,job=verify,outcome=failed": 2,
		"baton_job_runs_total,job=tick,outcome=ok":       1,
	} {
		if got[key] != want {
			t.Errorf("%s = %v, want %v", key, got[key], want)
		}
	}
}
