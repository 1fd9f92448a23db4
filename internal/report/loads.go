package report

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/noun"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing/ingest"
)

// LoadsShown is how many of the newest loads ReadLoads lists.
const LoadsShown = 20

// LoadsQuery is what status was asked of the loads: the newest
// (--loads), or the ones named (--load N), which it checks are present.
type LoadsQuery struct {
	Newest bool
	IDs    []int64
}

// Asked reports whether any load was asked for.
func (q LoadsQuery) Asked() bool { return q.Newest || len(q.IDs) > 0 }

// ReadLoads adds the loads asked for to s, and the ids named but not
// present to s.MissingLoads.
func ReadLoads(ctx context.Context, db *dbconn.DB, schemaName string, q LoadsQuery, s *Status) error {
	if !q.Asked() {
		return nil
	}
	loads, err := ingest.NewStore(db, schemaName).Loads(ctx, LoadsShown, q.IDs...)
	if err != nil {
		return fmt.Errorf("reading the loads asked for: %w", err)
	}
	s.Loads = loads
	for _, id := range q.IDs {
		if !slices.ContainsFunc(loads, func(l ingest.LoadInfo) bool { return l.LoadID == id }) {
			s.MissingLoads = append(s.MissingLoads, id)
		}
	}
	return nil
}

// MissingLoadsError is the error of a status asked to check loads that are
// not present (s.MissingLoads), wrapping partition.ErrNotFound; nil when
// every load asked for is present.
func (s Status) MissingLoadsError() error {
	ids := s.MissingLoads
	if len(ids) == 0 {
		return nil
	}
	names := make([]string, len(ids))
	for i, id := range ids {
		names[i] = fmt.Sprint(id)
	}
	list := strings.Join(names, ", ")
	return fmt.Errorf("%s not present: %w (it never committed, or its commit did not survive a failover: load its files again)",
		noun.Count(int64(len(ids)), "load "+list, "loads "+list), partition.ErrNotFound)
}
