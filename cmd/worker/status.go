package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/internal/dbconn"
	"github.com/batonhq/baton/partition"
)

// The JSON shape of "worker status --json" is a stable interface: fields
// may be added, never renamed or removed.
type statusJSON struct {
	Partitions []partitionJSON `json:"partitions"`
	Workers    []workerJSON    `json:"workers"`
	Totals     totalsJSON      `json:"totals"`
}

type partitionJSON struct {
	ContractID     string  `json:"contract_id"`
	Owner          *string `json:"owner"`
	OwnerInstance  *string `json:"owner_instance"`
	State          string  `json:"state"`
	Version        int64   `json:"version"`
	HeartbeatAgeMS *int64  `json:"heartbeat_age_ms"`
	Processed      int64   `json:"processed"`
	Pending        int64   `json:"pending"`
	Attempts       int     `json:"attempts"`
	Error          *string `json:"error"`
}

type workerJSON struct {
	ID             string    `json:"id"`
	Name           string    `json:"name"`
	Host           string    `json:"host"`
	PID            int       `json:"pid"`
	Mode           string    `json:"mode"`
	StartedAt      time.Time `json:"started_at"`
	HeartbeatAgeMS int64     `json:"heartbeat_age_ms"`
	Held           int       `json:"held"`
}

type totalsJSON struct {
	Partitions  int            `json:"partitions"`
	Processed   int64          `json:"processed"`
	Pending     int64          `json:"pending"`
	LiveWorkers int            `json:"live_workers"`
	ByState     map[string]int `json:"by_state"`
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func msPtr(d *time.Duration) *int64 {
	if d == nil {
		return nil
	}
	ms := d.Milliseconds()
	return &ms
}

func buildStatus(parts []partition.PartitionStatus, workers []partition.WorkerStatus) statusJSON {
	s := statusJSON{Partitions: []partitionJSON{}, Workers: []workerJSON{}, Totals: totalsJSON{ByState: map[string]int{}}}
	for _, p := range parts {
		s.Partitions = append(s.Partitions, partitionJSON{
			ContractID: p.Key, Owner: strPtr(p.Owner), OwnerInstance: strPtr(p.OwnerInstance), State: p.State,
			Version: p.Version, HeartbeatAgeMS: msPtr(p.HeartbeatAge), Processed: p.Processed, Pending: p.Pending,
			Attempts: p.Attempts, Error: strPtr(p.Error),
		})
		s.Totals.Partitions++
		s.Totals.Processed += p.Processed
		s.Totals.Pending += p.Pending
		s.Totals.ByState[p.State]++
	}
	for _, w := range workers {
		s.Workers = append(s.Workers, workerJSON{
			ID: w.InstanceID, Name: w.Name, Host: w.Hostname, PID: w.PID, Mode: w.Mode,
			StartedAt: w.StartedAt, HeartbeatAgeMS: w.HeartbeatAge.Milliseconds(), Held: w.Held,
		})
	}
	s.Totals.LiveWorkers = len(workers)
	return s
}

func newStatusCmd(g *globals) *cobra.Command {
	var asJSON, watch bool
	var every time.Duration
	cmd := &cobra.Command{
		Use:   "status [--json | --watch]",
		Short: "Show every contract's owner, state and progress, and the live workers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, err := g.open(cmd.Context(), dbconn.Options{MaxOpenConns: 2}, true)
			if err != nil {
				return err
			}
			defer db.Close()
			store := partition.NewStore(db)
			if watch {
				if asJSON {
					return usageError("--watch and --json do not go together")
				}
				return watchStatus(cmd.Context(), g, store, every)
			}
			parts, workers, err := store.Status(cmd.Context())
			if err != nil {
				return err
			}
			s := buildStatus(parts, workers)
			if asJSON {
				enc := json.NewEncoder(g.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(s)
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "CONTRACT\tSTATE\tOWNER\tVERSION\tHEARTBEAT\tPROCESSED\tPENDING\tATTEMPTS\tERROR")
			for _, p := range s.Partitions {
				owner, hb, errText := "-", "-", ""
				if p.Owner != nil {
					owner = *p.Owner
				}
				if p.HeartbeatAgeMS != nil {
					hb = (time.Duration(*p.HeartbeatAgeMS) * time.Millisecond).String()
				}
				if p.Error != nil {
					errText = *p.Error
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%d\t%s\n", p.ContractID, p.State, owner, p.Version, hb, p.Processed, p.Pending, p.Attempts, errText)
			}
			tw.Flush()
			fmt.Fprintf(g.stdout, "\n%d contracts: %d records priced, %d pending; states %v\n",
				s.Totals.Partitions, s.Totals.Processed, s.Totals.Pending, s.Totals.ByState)
			fmt.Fprintf(g.stdout, "%d live workers\n", len(s.Workers))
			for _, w := range s.Workers {
				fmt.Fprintf(g.stdout, "  %s (host %s, pid %d, %s): %d held, heartbeat %s ago\n",
					w.ID, w.Host, w.PID, w.Mode, w.Held, time.Duration(w.HeartbeatAgeMS)*time.Millisecond)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (stable field names) for scripts")
	cmd.Flags().BoolVar(&watch, "watch", false, "refresh a live view until interrupted")
	cmd.Flags().DurationVar(&every, "interval", time.Second, "refresh interval with --watch")
	return cmd
}

// watchStatus redraws the live view until ctx ends.
func watchStatus(ctx context.Context, g *globals, store *partition.Store, every time.Duration) error {
	if every <= 0 {
		return usageError("--interval must be positive")
	}
	view := newLiveView(g.stdout)
	view.rows = 20
	start := time.Now()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		parts, workers, err := store.Status(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		s := buildStatus(parts, workers)
		view.draw(s, s.Totals.Processed+s.Totals.Pending, time.Since(start))
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
