package report

import (
	"context"
	"time"

	"github.com/batonhq/baton/dbconn"
)

// Query is what a status report is asked for beyond the contracts and
// workers.
type Query struct {
	// WarnAfter is the age of a transaction holding back the xmin horizon
	// that counts as a warning.
	WarnAfter time.Duration
	// DrainTarget is the time the backlog should drain within; the workers
	// needed are computed for it.
	DrainTarget time.Duration
	// Loads are the loads to list or check.
	Loads LoadsQuery
	// Filter limits the contracts listed (the totals stay the cluster's).
	Filter Filter
}

// ReadAll reads the whole status "worker status" shows: Read, then the
// backlog, the generations in flight, the loads asked for, and the filter
// applied.
func ReadAll(ctx context.Context, db *dbconn.DB, schemaName string, q Query) (Status, error) {
	s, err := Read(ctx, db, schemaName, q.WarnAfter)
	if err != nil {
		return s, err
	}
	if err := ReadBacklog(ctx, db, schemaName, q.DrainTarget, &s); err != nil {
		return s, err
	}
	if err := ReadGenerations(ctx, db, schemaName, &s); err != nil {
		return s, err
	}
	if err := ReadLoads(ctx, db, schemaName, q.Loads, &s); err != nil {
		return s, err
	}
	q.Filter.Apply(&s)
	return s, nil
}
