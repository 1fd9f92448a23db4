package console_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/console"
	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
)

// The overview shows the kind's backlog signals and charts the stored
// samples of the last hour; the partitions list each one's ETA, and
// /api/overview carries the figures.
func TestBacklogSignalsOnTheOverview(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewURL(t)
	db := pgtest.Open(t, dsn, dbconn.Options{})
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `
		INSERT INTO baton.tasks (kind, partition_key, available, position, pending_since) VALUES
		    ('pricing', 'a', 100, 40, now() - interval '2 minutes'), ('pricing', 'b', 10, 10, NULL);
		INSERT INTO baton.workers (instance_id, name, kind, expires_at) VALUES ('w#1', 'w', 'pricing', now() + interval '1 hour');
		INSERT INTO baton.backlog_samples (kind, at, pending_items, pending_partitions, quarantined_items,
		       quarantined_partitions, added_items, rewound_items, workers)
		SELECT 'pricing', now() - i * interval '1 minute', 60 + i * 10, 1, 0, 0, 110, 0, 1 FROM generate_series(1, 30) i`); err != nil {
		t.Fatal(err)
	}
	srv, err := console.New(pgtest.Handle(db), console.Config{Addr: "127.0.0.1:0", Kind: "pricing", Noun: "contract", ItemUnit: "records",
		DrainTarget: 65 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	h := httptest.NewServer(srv.Handler())
	t.Cleanup(h.Close)

	_, body := get(t, h.URL+"/")
	for _, want := range []string{`id="backlog-signals"`, `id="backlog-pending">60<`, `id="backlog-chart"`, `id="backlog-needed">`} {
		if !strings.Contains(body, want) {
			t.Errorf("overview lacks %s:\n%s", want, body)
		}
	}
	if n := strings.Count(body[strings.Index(body, `points="`):], ","); n < 30 {
		t.Errorf("the chart has %d points, want 30 samples", n)
	}
	_, api := get(t, h.URL+"/api/overview")
	var ov struct {
		Signals struct {
			PendingItems int64 `json:"pending_items"`
			LagNS        int64 `json:"lag_ns"`
			RateKnown    bool  `json:"rate_known"`
			Needed       int   `json:"workers_needed"`
		} `json:"backlog_signals"`
	}
	if err := json.Unmarshal([]byte(api), &ov); err != nil {
		t.Fatal(err)
	}
	// Since the sample a minute ago (70 pending, 110 added): 10 priced in
	// W ≈ 60 s by one worker; 60 pending need ceil(6W/65) = 6 workers
	// within 65 s.
	s := ov.Signals
	if s.PendingItems != 60 || time.Duration(s.LagNS) < 2*time.Minute || !s.RateKnown || s.Needed != 6 {
		t.Errorf("backlog signals %+v: want 60 pending, lag ≥ 2m, a rate, 6 workers needed", s)
	}
	_, list := get(t, h.URL+"/contracts")
	if !strings.Contains(list, ">ETA<") {
		t.Errorf("the contracts list has no ETA column:\n%s", list)
	}
}
