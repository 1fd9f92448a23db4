package report

import (
	"context"
	"fmt"
	"time"

	"github.com/batonhq/baton/backlog"
	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing/pricer"
)

// ReadBacklog reads the pricing kind's backlog figures (without writing
// a sample: the workers serving metrics write them) and sets s.Backlog
// and every contract's ETA.
func ReadBacklog(ctx context.Context, db *dbconn.DB, schemaName string, drainTarget time.Duration, s *Status) error {
	r, err := backlog.New(db, backlog.Config{Schema: schemaName, DrainTarget: drainTarget})
	if err != nil {
		return fmt.Errorf("reading the backlog: %w", err)
	}
	figs, err := r.Read(ctx)
	if err != nil {
		return fmt.Errorf("reading the backlog: %w", err)
	}
	f := backlog.Figures{Kind: pricer.Kind, DrainTarget: drainTarget, Drains: true}
	for _, k := range figs {
		if k.Kind == pricer.Kind {
			f = k
		}
	}
	b := &Backlog{
		PendingItems: f.PendingItems, PendingContracts: f.PendingPartitions,
		QuarantinedItems: f.QuarantinedItems, QuarantinedContracts: f.QuarantinedPartitions,
		PausedItems: f.PausedItems, PausedContracts: f.PausedPartitions,
		LagMS: f.Lag.Milliseconds(), RateWindowMS: f.RateWindow.Milliseconds(), LiveWorkers: f.Workers,
		DrainTargetMS: f.DrainTarget.Milliseconds(), WorkersNeeded: f.WorkersNeeded,
	}
	if f.RateKnown {
		b.RatePerSecond = &f.Rate
	}
	if f.Drains {
		ms := f.DrainTime.Milliseconds()
		b.DrainMS = &ms
	}
	s.Backlog = b
	for i := range s.Partitions {
		s.Partitions[i].ETAMS = contractETA(f, s.Partitions[i])
	}
	return nil
}

// contractETA is when p will be priced at the current pace (Figures.ETA
// with the rows of it being priced), nil when it will not without an
// operator (quarantined, inconsistent) or there is no rate yet.
func contractETA(f backlog.Figures, p Contract) *int64 {
	if p.State == partition.StateQuarantined || p.State == StateInconsistent {
		return nil
	}
	held := p.SegmentsHeld
	if p.Owner != nil {
		held++
	}
	eta, ok := f.ETA(p.Pending, held)
	if !ok {
		return nil
	}
	ms := eta.Milliseconds()
	return &ms
}
