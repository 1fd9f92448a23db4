package console

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"github.com/batonhq/baton/internal/notify"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/horizon"
	"github.com/batonhq/baton/internal/eventscan"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/schema"
)

// States a partition can be filtered by, as partition.Status reports
// them. Confirming is a takeover whose first batch has not committed yet
// (the new owner waits for confirmation).
var states = []string{partition.StatePending, partition.StateActive, partition.StateConfirming, partition.StateCaughtUp,
	partition.StateStale, partition.StateBackoff, partition.StateQuarantined, partition.StateDone}

// part is one row of the partitions table.
type part struct {
	partition.PartitionStatus
	// OwnerBeatMS is the age of the owner instance's own last heartbeat
	// (its workers row, written at every beat); nil when unowned or the
	// owner has no workers row.
	OwnerBeatMS *int64
	// OwnerStatus is the owner instance's liveness (live, expired,
	// stopped), "" when unowned or unknown.
	OwnerStatus string
	// LeaseBeatMS is the age of the lease's last write on the task row,
	// which heartbeats rewrite only every few beats; LeaseLeftMS is the
	// time the lease has left (negative once expired). Nil when unowned.
	LeaseBeatMS, LeaseLeftMS *int64
	Percent                  float64
	Rate                     float64 // items/s over the last sample
	ETAMS                    *int64  // when it will be processed at the current pace (backlog.go); nil if unknown
	// Pause is the pause in force on it (its own, else its kind's); nil
	// when it is not paused (pause.go).
	Pause *partition.Pause
}

// Total is processed plus pending items.
func (c part) Total() int64 { return c.Processed + c.Pending }

// Worker liveness, from the workers row: live while its heartbeat has not
// expired, stopped once it said goodbye (StopWorker), expired when its
// heartbeat ran out without one (killed, hung, cut off).
const (
	workerLive    = "live"
	workerExpired = "expired"
	workerStopped = "stopped"
)

// worker is one row of the workers table, live or not.
type worker struct {
	InstanceID  string
	Name        string
	Hostname    string
	PID         int
	Mode        string
	Wake        string
	StartedAt   time.Time
	HeartbeatMS int64      // since its last heartbeat, database clock
	ExpiresMS   int64      // until its heartbeat expires; negative once expired
	StoppedAt   *time.Time // when it stopped, if it did
	Status      string     // live, expired or stopped
	Held        int        // partitions under a live lease
	Listening   bool       // has a notification connection open
}

// overview is the front page's numbers; it is also the payload of the
// server-sent events. Records/s and contracts keep the names the console
// first served them under; items/s and partitions are the same numbers.
type overview struct {
	Rate        float64        `json:"items_per_s"`
	LegacyRate  float64        `json:"records_per_s"`
	Processed   int64          `json:"processed"`
	Backlog     int64          `json:"backlog"`
	Partitions  int            `json:"partitions"`
	LegacyParts int            `json:"contracts"`
	Workers     int            `json:"workers_alive"`
	ByState     map[string]int `json:"by_state"`
	Held        map[string]int `json:"held_by_state"`
	Quarantined int            `json:"quarantined"`
	Takeovers   takeoverStats  `json:"takeovers_last_hour"`
	// Paused is the pauses in force of the kind: its own (key "") first.
	Paused  []partition.Pause `json:"paused"`
	Horizon horizon.View      `json:"horizon"`
	Signals *backlogView      `json:"backlog_signals"` // backlog.go
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
	At       time.Time
	Parts    []part
	Workers  []worker // live ones first
	Overview overview
}

// source reads the tables and remembers the previous positions, so that
// each read can report items/s.
type source struct {
	db    *dbconn.DB
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

func newSource(db *dbconn.DB, cfg Config) *source {
	return &source{db: db, store: partition.NewStore(db, cfg.Schema).Kind(cfg.Kind), cfg: cfg, rates: map[string]float64{}}
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
	parts, _, err := s.store.Status(ctx)
	if err != nil {
		return nil, err
	}
	if s.cfg.Inconsistent != nil {
		// Read after the task rows, as status does: work added in
		// between only adds items, never an inconsistency.
		bad, err := s.cfg.Inconsistent(ctx)
		if err != nil {
			return nil, fmt.Errorf("checking consistency: %w", err)
		}
		for i := range parts {
			if problem, ok := bad[parts[i].Key]; ok {
				parts[i].State, parts[i].Error = StateInconsistent, problem
			}
		}
	}
	workers, err := s.workers(ctx)
	if err != nil {
		return nil, err
	}
	tk, err := s.store.Takeovers(ctx, recentTakeovers)
	if err != nil {
		return nil, err
	}
	pauses, err := s.store.Paused(ctx)
	if err != nil {
		return nil, err
	}
	pauseOf := pausedBy(pauses)
	byID := make(map[string]*worker, len(workers))
	for i := range workers {
		byID[workers[i].InstanceID] = &workers[i]
	}
	now := s.cfg.Clock.Now()
	snap := &snapshot{At: now, Workers: workers}
	ov := &snap.Overview
	ov.ByState, ov.Held = map[string]int{}, map[string]int{}
	ov.Paused = append([]partition.Pause{}, pauses...)
	var total int64
	for _, p := range parts {
		c := part{PartitionStatus: p, LeaseBeatMS: msPtr(p.HeartbeatAge), LeaseLeftMS: msPtr(p.LeaseRemaining), Pause: pauseOf(p.Key)}
		if w := byID[p.OwnerInstance]; w != nil && p.OwnerInstance != "" {
			ms := w.HeartbeatMS
			c.OwnerBeatMS, c.OwnerStatus = &ms, w.Status
		}
		if t := c.Total(); t > 0 {
			c.Percent = 100 * float64(p.Processed) / float64(t)
		}
		snap.Parts = append(snap.Parts, c)
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
	for _, w := range workers {
		if w.Status == workerLive {
			ov.Workers++
		}
	}
	ov.Processed, ov.Partitions, ov.LegacyParts = total, len(parts), len(parts)
	ov.Takeovers = takeoverStats{Count: tk.Count, P50: tk.P50.Milliseconds(), P90: tk.P90.Milliseconds(),
		P99: tk.P99.Milliseconds(), Max: tk.Max.Milliseconds()}
	hr, err := horizon.NewReader(s.db, s.cfg.Schema).Read(ctx, s.cfg.HorizonWarnAfter)
	if err != nil {
		return nil, err
	}
	ov.Horizon = hr.View()
	if ov.Signals, err = s.readBacklog(ctx, snap.Parts); err != nil {
		return nil, err
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
	for i := range snap.Parts {
		snap.Parts[i].Rate = s.rates[snap.Parts[i].Key]
	}
	ov.Rate, ov.LegacyRate = s.rate, s.rate
	s.last = snap
	return snap, nil
}

func msPtr(d *time.Duration) *int64 {
	if d == nil {
		return nil
	}
	ms := d.Milliseconds()
	return &ms
}

// invalidate drops the cached snapshot: after an action, the next page
// shows its effect.
func (s *source) invalidate() {
	s.mu.Lock()
	s.last = nil
	s.mu.Unlock()
}

// workers reads every registered worker instance, live ones first, with
// its liveness by the database clock. Instances that stopped or expired
// stay listed until workers forget them (a day after they expired).
func (s *source) workers(ctx context.Context) ([]worker, error) {
	listening, err := s.listening(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, schema.SQL(s.cfg.Schema, `
		SELECT w.instance_id, w.name, w.hostname, w.pid, w.mode, w.wake, w.started_at,
		       (extract(epoch FROM now() - w.heartbeat_at) * 1000)::bigint,
		       -- A row written by hand may hold an infinite expiry.
		       CASE WHEN isfinite(w.expires_at) THEN (extract(epoch FROM w.expires_at - now()) * 1000)::bigint ELSE 0 END,
		       w.stopped_at,
		       CASE WHEN w.stopped_at IS NOT NULL THEN 'stopped'
		            WHEN w.expires_at <= now() THEN 'expired'
		            ELSE 'live' END AS status,
		       (SELECT count(*) FROM {{.Schema}}.tasks t
		        WHERE t.kind = w.kind AND t.owner = w.instance_id AND t.lease_expires_at > now())
		FROM {{.Schema}}.workers w
		WHERE w.kind = ?
		ORDER BY (w.stopped_at IS NULL AND w.expires_at > now()) DESC, w.name, w.instance_id`), s.cfg.Kind)
	if err != nil {
		return nil, fmt.Errorf("reading workers: %w", err)
	}
	defer rows.Close()
	var out []worker
	for rows.Next() {
		var w worker
		var stopped sql.NullTime
		if err := rows.Scan(&w.InstanceID, &w.Name, &w.Hostname, &w.PID, &w.Mode, &w.Wake, &w.StartedAt,
			&w.HeartbeatMS, &w.ExpiresMS, &stopped, &w.Status, &w.Held); err != nil {
			return nil, fmt.Errorf("reading workers: %w", err)
		}
		if stopped.Valid {
			w.StoppedAt = &stopped.Time
		}
		w.Listening = w.Status == workerLive && listening[w.InstanceID]
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading workers: %w", err)
	}
	return out, nil
}

// Events worth an operator's attention whatever their number: a takeover
// (the previous owner's lease expired), a fence rejection, a lost lease, a
// failure, a quarantine, an operator's retry, pause or resume. A release is routine when
// its reason is one the distributor gives in normal operation; a first
// batch is shown on its takeover's row.
var (
	notableKinds = []partition.EventKind{partition.EventTakeover, partition.EventFenced, partition.EventLost,
		partition.EventFailed, partition.EventQuarantined, partition.EventRetried, partition.EventPaused, partition.EventResumed}
	// A release because of a pause follows the pause's own event; one
	// for no room is a claim group's rider not finished by its first
	// batch, resumed by the next claim.
	normalReleases = []string{"", "caught_up", "rebalance", "shutdown", "paused", "no_room"}
)

// notable returns up to limit notable events of the last since, newest
// first, chosen by kind in the query, so any number of newer routine
// events (first batches, caught-up releases) cannot push them out. A
// takeover carries the takeover time of its claim's first batch, if that
// committed.
func (s *source) notable(ctx context.Context, since time.Duration, limit int) ([]partition.HistoryEntry, error) {
	rows, err := s.db.QueryContext(ctx, schema.SQL(s.cfg.Schema, `
		SELECT `+eventscan.Columns(`CASE WHEN e.kind = ? THEN (
		           SELECT f.takeover_ms FROM {{.Schema}}.events f
		           WHERE f.task_kind = e.task_kind AND f.partition_key = e.partition_key AND f.event_id > e.event_id
		             AND f.version = e.version AND f.kind = ?
		           ORDER BY f.event_id LIMIT 1)
		       ELSE e.takeover_ms END`)+`
		FROM {{.Schema}}.events e
		WHERE e.task_kind = ? AND e.at > now() - ?::interval
		  AND (e.kind IN (?) OR (e.kind = ? AND coalesce(e.detail, '') NOT IN (?)))
		ORDER BY e.event_id DESC
		LIMIT ?`),
		partition.EventTakeover, partition.EventFirstBatch, s.cfg.Kind, fmt.Sprintf("%d microseconds", since.Microseconds()),
		bun.List(notableKinds), partition.EventReleased, bun.List(normalReleases), limit)
	if err != nil {
		return nil, fmt.Errorf("reading notable events: %w", err)
	}
	out, err := eventscan.Scan(rows, func(e eventscan.Row[partition.EventKind]) partition.HistoryEntry { return partition.HistoryEntry(e) })
	if err != nil {
		return nil, fmt.Errorf("reading notable events: %w", err)
	}
	return out, nil
}

// severity grades an event for its colour: bad (a fence rejection, a
// failure, a quarantine), warn (a takeover, a lost lease, a release for an
// unusual reason), ok (a first batch, a caught-up release), info (a claim,
// a retry) or neutral (a routine hand-back).
func severity(e partition.HistoryEntry) string {
	switch e.Kind {
	case partition.EventFenced, partition.EventFailed, partition.EventQuarantined:
		return "bad"
	case partition.EventTakeover, partition.EventLost:
		return "warn"
	case partition.EventFirstBatch:
		return "ok"
	case partition.EventClaimed, partition.EventRetried:
		return "info"
	case partition.EventReleased:
		switch {
		case e.Detail == "caught_up":
			return "ok"
		case slices.Contains(normalReleases, e.Detail):
			return "neutral"
		}
		return "warn"
	}
	return "neutral"
}

func (s *source) listening(ctx context.Context) (map[string]bool, error) {
	rows, err := s.db.QueryContext(ctx, `
		SELECT substr(application_name, ?) FROM pg_stat_activity
		WHERE application_name LIKE ? AND datname = current_database()`,
		len(notify.ListenApplicationName)+1, notify.ListenApplicationName+"%")
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

// query is the partitions table's search, filter and sort, from the URL.
type query struct {
	Q     string
	State string
	Owner string
	Sort  string // a sortKeys key
	Desc  bool
}

// sortKeys are the partitions table's sort orders, by column. The key
// column's is named after the configured noun in URLs (sort=contract).
var sortKeys = map[string]func(a, b part) int{
	"key":       func(a, b part) int { return strings.Compare(a.Key, b.Key) },
	"state":     func(a, b part) int { return strings.Compare(a.State, b.State) },
	"owner":     func(a, b part) int { return strings.Compare(a.OwnerInstance, b.OwnerInstance) },
	"version":   func(a, b part) int { return cmp.Compare(a.Version, b.Version) },
	"heartbeat": func(a, b part) int { return cmp.Compare(age(a), age(b)) },
	"progress":  func(a, b part) int { return cmp.Compare(a.Percent, b.Percent) },
	"rate":      func(a, b part) int { return cmp.Compare(a.Rate, b.Rate) },
	"lag":       func(a, b part) int { return cmp.Compare(a.Pending, b.Pending) },
	"attempts":  func(a, b part) int { return cmp.Compare(a.Attempts, b.Attempts) },
	"error":     func(a, b part) int { return strings.Compare(a.Error, b.Error) },
}

// age orders by the owner's heartbeat age, unowned first.
func age(c part) int64 {
	if c.OwnerBeatMS == nil {
		return -1
	}
	return *c.OwnerBeatMS
}

// apply filters and sorts partitions, returning at most limit of them and
// how many matched.
func (q query) apply(cs []part, limit int) ([]part, int) {
	var out []part
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
		slices.SortStableFunc(out, func(a, b part) int {
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
