// Package report is the status of a pricing farm as "worker status" shows
// it: every contract's state, owner and progress (a contract split into
// segments folded into one row), the live workers, the totals by state,
// and what holds back vacuum (package horizon). Status is also the JSON of
// "worker status --json", a stable interface: fields may be added, never
// renamed or removed.
package report

import (
	"context"
	"fmt"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/horizon"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing/ingest"
	"github.com/batonhq/baton/pricing/pricer"
)

// StateInconsistent is the state status reports for a contract whose
// checkpoint or available count lies beyond its stored records
// (pricer.Inconsistent): an error, neither done nor pending.
const StateInconsistent = "inconsistent"

// Status is the status of the contracts and workers, in the JSON shape of
// "worker status --json", a stable interface: fields may be added, never
// renamed or removed.
type Status struct {
	Partitions []Contract `json:"partitions"`
	Workers    []Worker   `json:"workers"`
	Totals     Totals     `json:"totals"`
	// Horizon is what holds back vacuum (nil only where status is built
	// without reading it, as in the demo).
	Horizon *horizon.View `json:"horizon,omitempty"`
	// Loads are the loads asked for with --loads or --load, newest
	// first; MissingLoads the ids --load named that are not present.
	Loads        []ingest.LoadInfo `json:"loads,omitempty"`
	MissingLoads []int64           `json:"missing_loads,omitempty"`
	// Unlisted counts the contracts in the states asked for that --limit
	// (or plain status's default limit) left out of Partitions.
	Unlisted int `json:"unlisted,omitempty"`
	// Backlog is the pending records, lag, rate and drain estimate
	// (package backlog); nil where status is built without reading it.
	Backlog *Backlog `json:"backlog,omitempty"`
	// Paused is the pauses in force (paused.go): empty when nothing is
	// paused.
	Paused []Paused `json:"paused"`
	// Generations counts the re-pricings in flight and the previews
	// waiting for a decision; nil where status is built without reading
	// it.
	Generations *Generations `json:"generations,omitempty"`
}

// Backlog is the pricing kind's backlog signals (package backlog defines
// each figure).
type Backlog struct {
	PendingItems         int64 `json:"pending_items"`
	PendingContracts     int64 `json:"pending_contracts"`
	QuarantinedItems     int64 `json:"quarantined_items"`
	QuarantinedContracts int64 `json:"quarantined_contracts"`
	// PausedItems and PausedContracts are paused work, not in the
	// pending figures nor the lag (package backlog).
	PausedItems     int64 `json:"paused_items"`
	PausedContracts int64 `json:"paused_contracts"`
	LagMS           int64 `json:"lag_ms"`
	// RatePerSecond is records priced per second over RateWindowMS; null
	// while no sample of the workers is old enough.
	RatePerSecond *float64 `json:"rate_per_second"`
	RateWindowMS  int64    `json:"rate_window_ms"`
	LiveWorkers   int      `json:"live_workers"`
	// DrainMS is the pending records at that rate; null when they do not
	// drain (no rate, or none priced while records wait).
	DrainMS       *int64 `json:"drain_ms"`
	DrainTargetMS int64  `json:"drain_target_ms"`
	WorkersNeeded int    `json:"workers_needed"`
}

// Contract is a contract's row: its own task row's owner, version and
// heartbeat, with its segments' state and progress folded in.
type Contract struct {
	ContractID     string  `json:"contract_id"`
	Owner          *string `json:"owner"`
	OwnerInstance  *string `json:"owner_instance"`
	State          string  `json:"state"`
	Version        int64   `json:"version"`
	HeartbeatAgeMS *int64  `json:"heartbeat_age_ms"`
	Processed      int64   `json:"processed"`
	Pending        int64   `json:"pending"`
	// PricedThrough is the contract's processed prefix: its records up
	// to this seq are all priced. It is processed but for a contract
	// split into segments, whose segments price records past it at once.
	PricedThrough int64 `json:"priced_through"`
	// Segments is how many segments of the contract are not caught up,
	// SegmentsHeld how many of those a worker holds. Owner, version and
	// heartbeat are the contract's own row's; state, processed, pending,
	// attempts and error take its segments in.
	Segments     int     `json:"segments"`
	SegmentsHeld int     `json:"segments_held"`
	Attempts     int     `json:"attempts"`
	Error        *string `json:"error"`
	// ETAMS is when the contract will be priced at the current pace, in
	// ms from now; null without a rate or when it waits for an operator.
	ETAMS *int64 `json:"eta_ms"`
}

// Worker is a live worker instance and how many partitions it holds.
type Worker struct {
	ID             string    `json:"id"`
	Name           string    `json:"name"`
	Host           string    `json:"host"`
	PID            int       `json:"pid"`
	Mode           string    `json:"mode"`
	Wake           string    `json:"wake"`
	StartedAt      time.Time `json:"started_at"`
	HeartbeatAgeMS int64     `json:"heartbeat_age_ms"`
	Held           int       `json:"held"`
}

// Totals sum up the contracts (by state) and count the live workers.
type Totals struct {
	Partitions  int            `json:"partitions"`
	Processed   int64          `json:"processed"`
	Pending     int64          `json:"pending"`
	LiveWorkers int            `json:"live_workers"`
	ByState     map[string]int `json:"by_state"`
}

// strPtr is s, or nil when empty.
func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// msPtr is d in milliseconds, or nil.
func msPtr(d *time.Duration) *int64 {
	if d == nil {
		return nil
	}
	ms := d.Milliseconds()
	return &ms
}

// Build shapes the store's status of the contracts and workers as a
// Status, without its horizon.
func Build(parts []partition.PartitionStatus, workers []partition.WorkerStatus) Status {
	s := Status{Partitions: []Contract{}, Workers: []Worker{}, Totals: Totals{ByState: map[string]int{}}}
	for _, p := range parts {
		s.Partitions = append(s.Partitions, Contract{
			ContractID: p.Key, Owner: strPtr(p.Owner), OwnerInstance: strPtr(p.OwnerInstance), State: p.State,
			Version: p.Version, HeartbeatAgeMS: msPtr(p.HeartbeatAge), Processed: p.Processed, Pending: p.Pending,
			PricedThrough: p.DoneThrough, Segments: p.Segments, SegmentsHeld: p.SegmentsOwned,
			Attempts: p.Attempts, Error: strPtr(p.Error),
		})
		s.Totals.Partitions++
		s.Totals.Processed += p.Processed
		s.Totals.Pending += p.Pending
		s.Totals.ByState[p.State]++
	}
	for _, w := range workers {
		s.Workers = append(s.Workers, Worker{
			ID: w.InstanceID, Name: w.Name, Host: w.Hostname, PID: w.PID, Mode: w.Mode, Wake: w.Wake,
			StartedAt: w.StartedAt, HeartbeatAgeMS: w.HeartbeatAge.Milliseconds(), Held: w.Owned,
		})
	}
	s.Totals.LiveWorkers = len(workers)
	s.Paused = []Paused{}
	return s
}

// Read reads the contracts and live workers and reports as
// inconsistent, with the problem as their error, the contracts whose
// pricing partition claims more than their stored records. The records are
// read after the task rows: a load that commits in between only adds
// records, so it never makes a consistent contract look inconsistent. Then
// it reads what holds back vacuum, warning past warnAfter.
func Read(ctx context.Context, db *dbconn.DB, schemaName string, warnAfter time.Duration) (Status, error) {
	store := pricer.Partitions(db, schemaName)
	parts, workers, err := store.Status(ctx)
	if err != nil {
		return Status{}, err
	}
	pauses, err := store.Paused(ctx)
	if err != nil {
		return Status{}, err
	}
	var now time.Time
	if err := db.QueryRowContext(ctx, `SELECT now()`).Scan(&now); err != nil {
		return Status{}, fmt.Errorf("reading the database's clock: %w", err)
	}
	progress, err := pricer.NewStore(db, schemaName).CheckProgress(ctx)
	if err != nil {
		return Status{}, err
	}
	bad := make(map[string]pricer.Inconsistent, len(progress.Inconsistent))
	for _, c := range progress.Inconsistent {
		bad[c.ContractID] = c
	}
	if len(bad) > 0 {
		for i := range parts {
			if c, ok := bad[parts[i].Key]; ok {
				parts[i].State, parts[i].Error = StateInconsistent, c.Problem()
			}
		}
	}
	s := Build(parts, workers)
	s.Paused = buildPaused(pauses, now)
	hr, err := horizon.NewReader(db, schemaName).Read(ctx, warnAfter)
	if err != nil {
		return Status{}, err
	}
	v := hr.View()
	s.Horizon = &v
	return s, nil
}
