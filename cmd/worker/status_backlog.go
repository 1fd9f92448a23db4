package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/spf13/pflag"

	"github.com/batonhq/baton/backlog"
	"github.com/batonhq/baton/internal/report"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing/pricer"
)

// backlogJSON is the pricing kind's backlog signals in "status --json".
type backlogJSON = report.Backlog

// drainTargetFlag adds --drain-target to f.
func drainTargetFlag(f *pflag.FlagSet, d *time.Duration) {
	f.DurationVar(d, "drain-target", backlog.DrainTargetDefault,
		"the time the backlog should drain within: workers needed (status, metrics) is computed for it")
	positive(f, "drain-target")
}

// readBacklog reads the pricing kind's backlog figures (without writing
// a sample: the workers serving metrics write them) and sets s.Backlog
// and every contract's ETA.
func readBacklog(ctx context.Context, db *dbconn.DB, schemaName string, drainTarget time.Duration, s *statusJSON) error {
	r, err := backlog.New(db, backlog.Config{Schema: schemaName, DrainTarget: drainTarget})
	if err != nil {
		return err
	}
	figs, err := r.Read(ctx)
	if err != nil {
		return err
	}
	f := backlog.Figures{Kind: pricer.Kind, DrainTarget: drainTarget, Drains: true}
	for _, k := range figs {
		if k.Kind == pricer.Kind {
			f = k
		}
	}
	b := &backlogJSON{
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
func contractETA(f backlog.Figures, p partitionJSON) *int64 {
	if p.State == partition.StateQuarantined || p.State == report.StateInconsistent {
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

// etaText is a contract's ETA for the status table.
func etaText(p partitionJSON) string {
	switch {
	case p.ETAMS == nil:
		return "-"
	case *p.ETAMS == 0:
		return "now"
	default:
		return "in " + shortDuration(time.Duration(*p.ETAMS)*time.Millisecond)
	}
}

// shortDuration rounds d for reading: seconds under an hour, minutes
// beyond.
func shortDuration(d time.Duration) string {
	if d >= time.Hour {
		return d.Round(time.Minute).String()
	}
	return d.Round(time.Second).String()
}

// printBacklog writes the backlog signals.
func printBacklog(w io.Writer, b *backlogJSON) {
	if b == nil {
		return
	}
	rate, drain := "unknown (no sample a minute old yet)", "unknown"
	if b.RatePerSecond != nil {
		rate = fmt.Sprintf("%.1f records/s over the last %s", *b.RatePerSecond, shortDuration(time.Duration(b.RateWindowMS)*time.Millisecond))
		drain = "never at this rate"
	}
	if b.DrainMS != nil {
		drain = shortDuration(time.Duration(*b.DrainMS) * time.Millisecond)
	}
	fmt.Fprintf(w, "\nbacklog: %d records pending in %d contracts (%d quarantined in %d); lag %s\n",
		b.PendingItems, b.PendingContracts, b.QuarantinedItems, b.QuarantinedContracts,
		shortDuration(time.Duration(b.LagMS)*time.Millisecond))
	fmt.Fprintf(w, "rate: %s; drains in %s; %d workers would drain it within %s (%d live)\n",
		rate, drain, b.WorkersNeeded, shortDuration(time.Duration(b.DrainTargetMS)*time.Millisecond), b.LiveWorkers)
}
