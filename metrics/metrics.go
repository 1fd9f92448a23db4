// Package metrics exposes a worker's protocol events as Prometheus metrics
// and serves them over HTTP together with liveness and readiness probes.
// With WatchHorizon it also exposes, read from the database at scrape
// time, the age of the oldest transaction holding back the xmin horizon
// and the dead row versions of baton's tables (package horizon), so that
// an alert can be written on them.
//
// A worker creates its Metrics with New, wires them into its distributor's
// configuration with Instrument before distributor.New and gives them the
// distributor with Watch; Listen then serves /metrics (the "baton_"
// metrics and the Go and process collectors, on a registry of their own),
// /healthz (always "ok" while the process serves) and /readyz ("ready"
// while the given check passes, 503 otherwise). Scheduled jobs report
// through OnJobRun (schedule.Config.OnRun).
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
)

// Metrics are a worker's counters, gauges and histograms, all prefixed
// "baton_".
type Metrics struct {
	Registry *prometheus.Registry

	claims          *prometheus.CounterVec // result=won|lost
	takeovers       prometheus.Counter
	confirmed       prometheus.Counter
	heartbeats      *prometheus.CounterVec // result=ok|failed
	heartbeatTime   prometheus.Histogram
	renewed         prometheus.Gauge
	items           prometheus.Counter
	batches         prometheus.Counter
	commitTime      prometheus.Histogram
	fenced          prometheus.Counter
	releases        *prometheus.CounterVec // reason
	lost            prometheus.Counter
	failures        prometheus.Counter
	quarantined     prometheus.Counter
	notReplicated   prometheus.Counter
	heldByStateDesc *prometheus.Desc
	held            func() map[string]int
	lazy            lazyMetrics // registered on first use (verify.go)
}

// New registers baton's metrics (and the Go and process collectors) on a
// fresh registry.
func New() *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry()}
	f := func(c prometheus.Collector) { m.Registry.MustRegister(c) }
	m.claims = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "baton_claims_total",
		Help: "Partition claim attempts, by result: won, or lost to another worker's compare-and-set."}, []string{"result"})
	m.takeovers = prometheus.NewCounter(prometheus.CounterOpts{Name: "baton_takeovers_total",
		Help: "Claims of partitions whose previous owner's lease had expired."})
	m.confirmed = prometheus.NewCounter(prometheus.CounterOpts{Name: "baton_takeovers_confirmed_total",
		Help: "Takeovers that survived the confirmation heartbeats."})
	m.heartbeats = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "baton_heartbeats_total",
		Help: "Heartbeat statements, by result: ok or failed."}, []string{"result"})
	m.heartbeatTime = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "baton_heartbeat_seconds",
		Help: "Latency of the heartbeat statement (all held partitions in one statement).", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)})
	m.renewed = prometheus.NewGauge(prometheus.GaugeOpts{Name: "baton_heartbeat_renewed_partitions",
		Help: "Partitions renewed by the last successful heartbeat."})
	m.items = prometheus.NewCounter(prometheus.CounterOpts{Name: "baton_records_processed_total",
		Help: "Work items (records priced) committed."})
	m.batches = prometheus.NewCounter(prometheus.CounterOpts{Name: "baton_batches_committed_total",
		Help: "Batches committed with their checkpoint."})
	m.commitTime = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "baton_batch_commit_seconds",
		Help: "Time from the start of a batch transaction to its commit.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)})
	m.fenced = prometheus.NewCounter(prometheus.CounterOpts{Name: "baton_fenced_commits_total",
		Help: "Batch commits rejected by the fence because the claim was no longer current."})
	m.releases = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "baton_releases_total",
		Help: "Partitions handed back, by reason: caught_up, rebalance, shutdown, no_room (a claim group's member beyond the worker's room, not finished by its first batch)."}, []string{"reason"})
	m.lost = prometheus.NewCounter(prometheus.CounterOpts{Name: "baton_partitions_lost_total",
		Help: "Partitions lost: taken over by another claim or expired locally without a heartbeat."})
	m.failures = prometheus.NewCounter(prometheus.CounterOpts{Name: "baton_batch_failures_total",
		Help: "Batches that failed and sent their partition into back-off."})
	m.quarantined = prometheus.NewCounter(prometheus.CounterOpts{Name: "baton_quarantined_total",
		Help: "Partitions quarantined after too many failed attempts."})
	m.notReplicated = prometheus.NewCounter(prometheus.CounterOpts{Name: "baton_batches_not_replicated_total",
		Help: "Batches committed on the primary that PostgreSQL reported as not confirmed by its synchronous standby (a failover may lose them; they are then processed again)."})
	m.heldByStateDesc = prometheus.NewDesc("baton_partitions_held",
		"Partitions held by this worker, by state: confirming, active, handing_back.", []string{"state"}, nil)
	for _, c := range []prometheus.Collector{m.claims, m.takeovers, m.confirmed, m.heartbeats, m.heartbeatTime,
		m.renewed, m.items, m.batches, m.commitTime, m.fenced, m.releases, m.lost, m.failures, m.quarantined, m.notReplicated,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		f(c)
	}
	m.claims.WithLabelValues("won")
	m.claims.WithLabelValues("lost")
	m.heartbeats.WithLabelValues("ok")
	m.heartbeats.WithLabelValues("failed")
	for _, r := range []string{"caught_up", "rebalance", "shutdown", "no_room"} {
		m.releases.WithLabelValues(r)
	}
	f(heldCollector{m})
	return m
}

type heldCollector struct{ m *Metrics }

func (c heldCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.m.heldByStateDesc }

func (c heldCollector) Collect(ch chan<- prometheus.Metric) {
	if c.m.held == nil {
		return
	}
	for state, n := range c.m.held() {
		ch <- prometheus.MustNewConstMetric(c.m.heldByStateDesc, prometheus.GaugeValue, float64(n), state)
	}
}

// Instrument wires the metrics into a distributor configuration; call
// Watch with the distributor once it exists, for the held gauge.
func (m *Metrics) Instrument(cfg *distributor.Config) {
	prevEvent, prevBeat := cfg.OnEvent, cfg.OnHeartbeat
	cfg.OnEvent = func(e distributor.Event) {
		m.OnEvent(e)
		if prevEvent != nil {
			prevEvent(e)
		}
	}
	cfg.OnHeartbeat = func(err error, latency time.Duration, renewed int) {
		m.OnHeartbeat(err, latency, renewed)
		if prevBeat != nil {
			prevBeat(err, latency, renewed)
		}
	}
}

// WatchDB reports, as baton_commits_not_replicated_total, the commits on
// db (every statement and transaction of the worker on it: batches,
// heartbeats, claims, scheduled jobs, leaderships) that PostgreSQL
// reported as not confirmed by its synchronous standby
// (dbconn.ErrNotReplicated).
func (m *Metrics) WatchDB(db *dbconn.DB) {
	m.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "baton_commits_not_replicated_total",
		Help: "Commits on the worker's database handle that PostgreSQL reported as not confirmed by its synchronous standby: they may not survive a failover."},
		func() float64 { return float64(db.NotReplicatedCommits()) }))
}

// Watch reports d's held partitions in baton_partitions_held.
func (m *Metrics) Watch(d *distributor.Distributor) { m.held = d.PartitionsByState }

// OnEvent counts a protocol event.
func (m *Metrics) OnEvent(e distributor.Event) {
	switch e.Kind {
	case distributor.EventClaimed:
		m.claims.WithLabelValues("won").Inc()
		if e.Takeover {
			m.takeovers.Inc()
		}
	case distributor.EventClaimLost:
		m.claims.WithLabelValues("lost").Add(float64(e.Items))
	case distributor.EventConfirmed:
		m.confirmed.Inc()
	case distributor.EventCheckpoint:
		m.items.Add(float64(e.Items))
		m.batches.Inc()
		m.commitTime.Observe(e.Duration.Seconds())
	case distributor.EventFenced:
		m.fenced.Inc()
	case distributor.EventReleased:
		m.releases.WithLabelValues(e.Reason).Inc()
	case distributor.EventLost:
		m.lost.Inc()
	case distributor.EventFailed:
		m.failures.Inc()
	case distributor.EventQuarantined:
		m.failures.Inc()
		m.quarantined.Inc()
	case distributor.EventNotReplicated:
		m.notReplicated.Inc()
	}
}

// OnHeartbeat records a heartbeat's outcome.
func (m *Metrics) OnHeartbeat(err error, latency time.Duration, renewed int) {
	if err != nil {
		m.heartbeats.WithLabelValues("failed").Inc()
		return
	}
	m.heartbeats.WithLabelValues("ok").Inc()
	m.heartbeatTime.Observe(latency.Seconds())
	m.renewed.Set(float64(renewed))
}

// Server serves /metrics, /healthz (the process is alive) and /readyz
// (ready returns nil: database reachable and schema current).
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan error
}

// Listen binds addr and returns a server ready to Start.
func Listen(addr string, m *Metrics, ready func(context.Context) error, log *slog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening for metrics on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := ready(ctx); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	s := &Server{ln: ln, done: make(chan error, 1), srv: &http.Server{
		Handler: mux, ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}}
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Start serves in the background and returns at once.
func (s *Server) Start() {
	go func() {
		err := s.srv.Serve(s.ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.done <- err
	}()
}

// Stop shuts the server down, waiting briefly for requests in flight.
func (s *Server) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
	<-s.done
}
