package console

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/partition"
)

// States a contract can be filtered by. Confirming is a takeover whose
// first batch has not committed yet (the new owner waits for confirmation);
// the others are partition.Status's.
var states = []string{"pending", "active", "confirming", "caught_up", "stale", "backoff", "quarantined", "done"}

// contract is one row of the contracts table.
type contract struct {
	partition.PartitionStatus
	HeartbeatMS *int64
	Percent     float64
	Rate        float64 // records/s over the last sample
}

// Total is processed plus pending records.
func (c contract) Total() int64 { return c.Processed + c.Pending }

// worker is one row of the workers table.
type worker struct {
	partition.WorkerStatus
	HeartbeatMS int64
	Listening   bool
}

// overview is the front page's numbers; it is also the payload of the
// server-sent events.
type overview struct {
	Rate        float64        `json:"records_per_s"`
	Processed   int64          `json:"processed"`
	Backlog     int64          `json:"backlog"`
	Contracts   int            `json:"contracts"`
	Workers     int            `json:"workers_alive"`
	ByState     map[string]int `json:"by_state"`
	Held        map[string]int `json:"held_by_state"`
	Quarantined int            `json:"quarantined"`
	Takeovers   takeoverStats  `json:"takeovers_last_hour"`
}

type takeoverStats struct {
	Count int   `json:"count"`
	P50   int64 `json:"p50_ms"`
	P90   int64 `json:"p90_ms"`
	P99   int64 `json:"p99_ms"`
	Max   int64 `json:"max_ms"`
}

// snapshot is one read of the whole picture.
type snapshot struct {
	At        time.Time
	Contracts []contract
	Workers   []worker
	Overview  overview
}

// source reads the tables and remembers the previous positions, so that
// each read can report records/s.
type source struct {
	db    bun.IDB
	store *partition.Store
	cfg   Config

	mu     sync.Mutex
	prev   map[string]int64 // partition → position at prevAt
	prevT  int64
	prevAt time.Time
	rates  map[string]float64
	rate   float64
	// last is the latest snapshot: reused for half a refresh interval, so
	// that the database is read about twice an interval however many
	// pages and event streams are open. Read-only once taken.
	last *snapshot
}

func newSource(db bun.IDB, cfg Config) *source {
	return &source{db: db, store: partition.NewStore(db, cfg.Schema), cfg: cfg, rates: map[string]float64{}}
}

// read returns a snapshot at most half a refresh interval old. Rates are
// recomputed when at least half an interval has passed since the last
// sample, so many viewers do not make them noisy.
func (s *source) read(ctx context.Context) (*snapshot, error) {
	s.mu.Lock()
	if last := s.last; last != nil && s.cfg.Clock.Since(last.At) < s.cfg.Refresh/2 {
		s.mu.Unlock()
		return last, nil
	}
	s.mu.Unlock()
	parts, workers, err := s.store.Status(ctx)
	if err != nil {
		return nil, err
	}
	confirming, err := s.confirming(ctx)
	if err != nil {
		return nil, err
	}
	listening, err := s.listening(ctx)
	if err != nil {
		return nil, err
	}
	tk, err := s.store.Takeovers(ctx, recentTakeovers)
	if err != nil {
		return nil, err
	}
	now := s.cfg.Clock.Now()
	snap := &snapshot{At: now}
	ov := &snap.Overview
	ov.ByState, ov.Held = map[string]int{}, map[string]int{}
	var total int64
	for _, p := range parts {
		if p.State == partition.StateActive && confirming[p.Key] == p.Version {
			p.State = "confirming"
		}
		c := contract{PartitionStatus: p}
		if p.HeartbeatAge != nil {
			ms := p.HeartbeatAge.Milliseconds()
			c.HeartbeatMS = &ms
		}
		if t := c.Total(); t > 0 {
			c.Percent = 100 * float64(p.Processed) / float64(t)
		}
		snap.Contracts = append(snap.Contracts, c)
		total += p.Processed
		ov.Backlog += p.Pending
		ov.ByState[p.State]++
		if p.OwnerInstance != "" {
			ov.Held[p.State]++
		}
		if p.State == partition.StateQuarantined {
			ov.Quarantined++
		}
	}
	ov.Processed, ov.Contracts, ov.Workers = total, len(parts), len(workers)
	ov.Takeovers = takeoverStats{Count: tk.Count, P50: tk.P50.Milliseconds(), P90: tk.P90.Milliseconds(),
		P99: tk.P99.Milliseconds(), Max: tk.Max.Milliseconds()}
	for _, w := range workers {
		snap.Workers = append(snap.Workers, worker{WorkerStatus: w, HeartbeatMS: w.HeartbeatAge.Milliseconds(),
			Listening: listening[w.InstanceID]})
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if dt := now.Sub(s.prevAt); s.prev == nil || dt >= s.cfg.Refresh/2 {
		next := make(map[string]int64, len(parts))
		rates := make(map[string]float64, len(parts))
		for _, p := range parts {
			next[p.Key] = p.Processed
			if old, ok := s.prev[p.Key]; ok && dt > 0 && p.Processed >= old {
				rates[p.Key] = float64(p.Processed-old) / dt.Seconds()
			}
		}
		if s.prev != nil && dt > 0 && total >= s.prevT {
			s.rate = float64(total-s.prevT) / dt.Seconds()
		}
		s.prev, s.prevT, s.prevAt, s.rates = next, total, now, rates
	}
	for i := range snap.Contracts {
		snap.Contracts[i].Rate = s.rates[snap.Contracts[i].Key]
	}
	ov.Rate = s.rate
	s.last = snap
	return snap, nil
}

// invalidate drops the cached snapshot: after an action, the next page
// shows its effect.
func (s *source) invalidate() {
	s.mu.Lock()
	s.last = nil
	s.mu.Unlock()
}

// confirming maps partitions whose latest claim is a takeover without a
// committed first batch to that claim's version.
func (s *source) confirming(ctx context.Context) (map[string]int64, error) {
	evs, err := s.store.RecentEvents(ctx, recentTakeovers, 10000, partition.EventTakeover, partition.EventFirstBatch)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	started := map[string]int64{}
	for _, e := range evs { // newest first
		switch e.Kind {
		case partition.EventFirstBatch:
			if _, ok := started[e.Key]; !ok {
				started[e.Key] = e.Version
			}
		case partition.EventTakeover:
			if _, seen := out[e.Key]; !seen && started[e.Key] != e.Version {
				out[e.Key] = e.Version
			}
		}
	}
	return out, nil
}

func (s *source) listening(ctx context.Context) (map[string]bool, error) {
	rows, err := s.db.QueryContext(ctx, `
		SELECT substr(application_name, ?) FROM pg_stat_activity
		WHERE application_name LIKE ? AND datname = current_database()`,
		len(partition.ListenApplicationName)+1, partition.ListenApplicationName+"%")
	if err != nil {
		return nil, fmt.Errorf("reading listening workers: %w", err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("reading listening workers: %w", err)
		}
		out[id] = true
	}
	return out, rows.Err()
}

// query is the contracts table's search, filter and sort, from the URL.
type query struct {
	Q     string
	State string
	Owner string
	Sort  string
	Desc  bool
}

var sortKeys = map[string]func(a, b contract) int{
	"contract":  func(a, b contract) int { return strings.Compare(a.Key, b.Key) },
	"state":     func(a, b contract) int { return strings.Compare(a.State, b.State) },
	"owner":     func(a, b contract) int { return strings.Compare(a.OwnerInstance, b.OwnerInstance) },
	"version":   func(a, b contract) int { return cmp.Compare(a.Version, b.Version) },
	"heartbeat": func(a, b contract) int { return cmp.Compare(age(a), age(b)) },
	"progress":  func(a, b contract) int { return cmp.Compare(a.Percent, b.Percent) },
	"rate":      func(a, b contract) int { return cmp.Compare(a.Rate, b.Rate) },
	"lag":       func(a, b contract) int { return cmp.Compare(a.Pending, b.Pending) },
	"attempts":  func(a, b contract) int { return cmp.Compare(a.Attempts, b.Attempts) },
	"error":     func(a, b contract) int { return strings.Compare(a.Error, b.Error) },
}

func age(c contract) int64 {
	if c.HeartbeatMS == nil {
		return -1
	}
	return *c.HeartbeatMS
}

// apply filters and sorts contracts, returning at most limit of them and
// how many matched.
func (q query) apply(cs []contract, limit int) ([]contract, int) {
	var out []contract
	needle := strings.ToLower(q.Q)
	for _, c := range cs {
		if q.State != "" && c.State != q.State {
			continue
		}
		if q.Owner != "" && c.Owner != q.Owner && c.OwnerInstance != q.Owner {
			continue
		}
		if needle != "" && !strings.Contains(strings.ToLower(c.Key), needle) &&
			!strings.Contains(strings.ToLower(c.OwnerInstance), needle) && !strings.Contains(strings.ToLower(c.Error), needle) {
			continue
		}
		out = append(out, c)
	}
	if by, ok := sortKeys[q.Sort]; ok {
		slices.SortStableFunc(out, func(a, b contract) int {
			if q.Desc {
				return by(b, a)
			}
			return by(a, b)
		})
	}
	n := len(out)
	if len(out) > limit {
		out = out[:limit]
	}
	return out, n
}
