package backlog

import (
	"math"
	"time"

	"github.com/batonhq/baton/internal/taskstore"
)

// Figures are one kind's backlog signals at one instant (see the package
// documentation for their exact definitions).
type Figures struct {
	Kind string    `json:"kind"`
	At   time.Time `json:"at"` // database clock

	PendingItems          int64 `json:"pending_items"`
	PendingPartitions     int64 `json:"pending_partitions"`
	QuarantinedItems      int64 `json:"quarantined_items"`
	QuarantinedPartitions int64 `json:"quarantined_partitions"`
	PausedItems           int64 `json:"paused_items"`
	PausedPartitions      int64 `json:"paused_partitions"`

	Lag time.Duration `json:"lag_ns"`

	// Rate is items processed per second over RateWindow, the span
	// actually used (between MinRateWindow and two windows); both 0 with
	// RateKnown false when no sample qualified.
	Rate       float64       `json:"rate_items_per_second"`
	RateKnown  bool          `json:"rate_known"`
	RateWindow time.Duration `json:"rate_window_ns"`
	// PerWorkerRate is Rate divided by the mean live-worker count over
	// the window (0 when no worker was live).
	PerWorkerRate float64 `json:"per_worker_rate_items_per_second"`

	Workers int `json:"workers"`

	// DrainTime is PendingItems / Rate when Drains; Drains is false
	// while work is pending and the rate is unknown or 0.
	DrainTime     time.Duration `json:"drain_ns"`
	Drains        bool          `json:"drains"`
	DrainTarget   time.Duration `json:"drain_target_ns"`
	WorkersNeeded int           `json:"workers_needed"`
}

// derive computes the figures from a row of totals under cfg.
func derive(r taskstore.BacklogRow, cfg Config) Figures {
	f := Figures{
		Kind: r.Kind, At: r.At,
		PendingItems: r.PendingItems, PendingPartitions: r.PendingPartitions,
		QuarantinedItems: r.QuarantinedItems, QuarantinedPartitions: r.QuarantinedPartitions,
		PausedItems: r.PausedItems, PausedPartitions: r.PausedPartitions,
		Workers: r.Workers, DrainTarget: cfg.DrainTarget,
	}
	if !r.OldestPending.IsZero() {
		f.Lag = max(r.At.Sub(r.OldestPending), 0)
	}
	if !r.RefAt.IsZero() && r.At.After(r.RefAt) {
		f.RateWindow = r.At.Sub(r.RefAt)
		f.Rate = max(float64(r.Processed), 0) / f.RateWindow.Seconds()
		f.RateKnown = true
		if r.MeanWorkers > 0 {
			f.PerWorkerRate = f.Rate / r.MeanWorkers
		}
	}
	switch {
	case f.PendingItems == 0:
		f.Drains = true
	case f.Rate > 0:
		f.Drains = true
		f.DrainTime = seconds(float64(f.PendingItems) / f.Rate)
	}
	f.WorkersNeeded = workersNeeded(f.PendingItems, f.PerWorkerRate, f.Workers, cfg.DrainTarget)
	return f
}

// workersNeeded is how many workers processing perWorker items a second
// each drain pending items within target; with no per-worker rate while
// work is pending, the current count and at least one.
func workersNeeded(pending int64, perWorker float64, workers int, target time.Duration) int {
	if pending <= 0 {
		return 0
	}
	if perWorker <= 0 || target <= 0 {
		return max(workers, 1)
	}
	n := math.Ceil(float64(pending) / (perWorker * target.Seconds()))
	if n > math.MaxInt32 {
		return math.MaxInt32
	}
	return max(int(n), 1)
}

// seconds is s seconds as a Duration, saturating.
func seconds(s float64) time.Duration {
	if s >= float64(math.MaxInt64)/float64(time.Second) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(s * float64(time.Second))
}
