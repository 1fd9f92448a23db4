package metrics

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/batonhq/baton/backlog"
	"github.com/batonhq/baton/internal/pgtest"
)

// watchSampledBacklog registers m's backlog gauges over a fresh database
// with one pending partition of kind k and a live worker, sampled once.
func watchSampledBacklog(t *testing.T, m *Metrics) {
	t.Helper()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	if _, err := db.ExecContext(ctx, `
		INSERT INTO baton.tasks (kind, partition_key, available, position, pending_since) VALUES ('k', 'a', 40, 10, now() - interval '90 seconds');
		INSERT INTO baton.workers (instance_id, name, kind, expires_at) VALUES ('w#1', 'w', 'k', now() + interval '1 hour');
		INSERT INTO baton.backlog_samples (kind, at, pending_items, pending_partitions, quarantined_items,
		       quarantined_partitions, added_items, rewound_items, workers)
		VALUES ('k', now() - interval '60 seconds', 60, 1, 0, 0, 40, 0, 1)`); err != nil {
		t.Fatal(err)
	}
	r, err := backlog.New(pgtest.Handle(db), backlog.Config{DrainTarget: 11 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p := backlog.NewPublisher(r, slog.New(slog.NewTextHandler(io.Discard, nil)))
	m.WatchBacklog(p)
	sampled := p.Sampled()
	p.Start(ctx)
	t.Cleanup(p.Stop)
	select {
	case <-sampled:
	case <-time.After(30 * time.Second):
		t.Fatal("no sampling within 30 s")
	}
}

// The gauges publish the figures of the last sampling.
func TestBacklogGauges(t *testing.T) {
	t.Parallel()
	m := New()
	watchSampledBacklog(t, m)
	// Since the sample: nothing added, pending 60 → 30: 30 processed in
	// W ≈ 60 s by one worker; 30 pending at 30/W a second need
	// ceil(W/11) = 6 workers for an 11 s target.
	got := map[string]float64{}
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, mt := range f.GetMetric() {
			if len(mt.GetLabel()) == 1 && mt.GetLabel()[0].GetValue() == "k" {
				got[f.GetName()] = mt.GetGauge().GetValue()
			}
		}
	}
	for name, want := range map[string]float64{"baton_backlog_pending_items": 30, "baton_backlog_pending_partitions": 1,
		"baton_backlog_quarantined_items": 0, "baton_backlog_workers": 1, "baton_backlog_workers_needed": 6,
		"baton_backlog_drain_target_seconds": 11} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	lag, rate := got["baton_backlog_lag_seconds"], got["baton_backlog_rate_items_per_second"]
	if lag < 90 || lag > 120 {
		t.Errorf("lag %v s, want about 90", lag)
	}
	if rate < 0.4 || rate > 0.5 {
		t.Errorf("rate %v items/s, want about 0.5", rate)
	}
}
