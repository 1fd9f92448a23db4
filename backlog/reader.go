package backlog

import (
	"context"
	"time"

	"github.com/batonhq/baton/dbconn"

	"github.com/batonhq/baton/internal/taskstore"
)

// Reader reads the backlog figures of every kind from a database.
type Reader struct {
	db  *dbconn.DB
	cfg Config
}

// New returns a Reader over db,
// with cfg's defaults filled in, or cfg's error.
func New(db *dbconn.DB, cfg Config) (*Reader, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Reader{db: db, cfg: cfg}, nil
}

// Config is the reader's configuration, defaults filled in.
func (r *Reader) Config() Config { return r.cfg }

// Read returns every kind's figures (ordered by kind) without writing
// anything: the rate comes from samples that recording readers stored.
func (r *Reader) Read(ctx context.Context) ([]Figures, error) { return r.read(ctx, false) }

// Sample returns every kind's figures like Read and stores the current
// totals as a sample for each kind whose newest sample is older than
// SampleEvery (and deletes samples older than SampleKeep).
func (r *Reader) Sample(ctx context.Context) ([]Figures, error) { return r.read(ctx, true) }

func (r *Reader) read(ctx context.Context, record bool) ([]Figures, error) {
	p := taskstore.BacklogParams{
		Window: r.cfg.RateWindow, MinWindow: r.cfg.MinRateWindow,
		Record: record, SampleGap: r.cfg.SampleEvery, Keep: SampleKeep,
	}
	if r.cfg.Now != nil {
		now := r.cfg.Now()
		p.Now = &now
	}
	rows, err := taskstore.ReadBacklog(ctx, r.db, r.cfg.Schema, p)
	if err != nil {
		return nil, err
	}
	out := make([]Figures, len(rows))
	for i, row := range rows {
		out[i] = derive(row, r.cfg)
	}
	return out, nil
}

// Point is one stored sample of a kind's backlog.
type Point struct {
	At               time.Time `json:"at"`
	PendingItems     int64     `json:"pending_items"`
	QuarantinedItems int64     `json:"quarantined_items"`
	Workers          int       `json:"workers"`
}

// History returns kind's stored samples of the last span (at most
// SampleKeep), oldest first, for a chart.
func (r *Reader) History(ctx context.Context, kind string, span time.Duration) ([]Point, error) {
	now := time.Now()
	if r.cfg.Now != nil {
		now = r.cfg.Now()
	}
	samples, err := taskstore.BacklogHistory(ctx, r.db, r.cfg.Schema, kind, now.Add(-min(span, SampleKeep)))
	if err != nil {
		return nil, err
	}
	out := make([]Point, len(samples))
	for i, s := range samples {
		out[i] = Point{At: s.At, PendingItems: s.PendingItems, QuarantinedItems: s.QuarantinedItems, Workers: s.Workers}
	}
	return out, nil
}

// ETA estimates when a partition of f's kind with pending items, held
// rows of which (its own and its segments') are being processed, will be
// processed at the current pace: pending at the per-worker rate times
// held (at least one), and no later than DrainTime, when the whole kind
// is drained. ok is false when there is no rate to estimate from; a
// partition with nothing pending is done now (0, true).
func (f Figures) ETA(pending int64, held int) (eta time.Duration, ok bool) {
	if pending <= 0 {
		return 0, true
	}
	if f.PerWorkerRate <= 0 {
		return 0, false
	}
	eta = seconds(float64(pending) / (f.PerWorkerRate * float64(max(held, 1))))
	if f.Drains {
		eta = min(eta, f.DrainTime)
	}
	return eta, true
}
