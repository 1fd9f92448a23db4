package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/report"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing/ingest"
)

// loadsShown is how many of the newest loads status --loads lists.
const loadsShown = 20

// loadsQuery is what status was asked of the loads: the newest
// (--loads), or the ones named (--load N), which it checks are present.
type loadsQuery struct {
	newest bool
	ids    []int64
}

func (q loadsQuery) asked() bool { return q.newest || len(q.ids) > 0 }

// readLoads adds the loads asked for to s, and the ids named but not
// present to s.MissingLoads.
func readLoads(ctx context.Context, db *dbconn.DB, schemaName string, q loadsQuery, s *statusJSON) error {
	if !q.asked() {
		return nil
	}
	loads, err := ingest.NewStore(db, schemaName).Loads(ctx, loadsShown, q.ids...)
	if err != nil {
		return err
	}
	s.Loads = loads
	for _, id := range q.ids {
		if !slices.ContainsFunc(loads, func(l ingest.LoadInfo) bool { return l.LoadID == id }) {
			s.MissingLoads = append(s.MissingLoads, id)
		}
	}
	return nil
}

// missingLoads is status's error when a load it was asked to check is
// not present (exit 5).
func missingLoads(ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	names := make([]string, len(ids))
	for i, id := range ids {
		names[i] = fmt.Sprint(id)
	}
	return fmt.Errorf("%s not present: %w (it never committed, or its commit did not survive a failover: load its files again)",
		nounCount(int64(len(ids)), "load "+strings.Join(names, ", "), "loads "+strings.Join(names, ", ")), partition.ErrNotFound)
}

// printLoads writes the loads table of status --loads.
func printLoads(w io.Writer, s statusJSON) {
	if s.Loads == nil && s.MissingLoads == nil {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LOAD\tFINISHED\tACCEPTED\tRE-DELIVERED\tREJECTED\tPRUNED\tFILES")
	for _, l := range s.Loads {
		finished := "-"
		if l.FinishedAt != nil {
			finished = l.FinishedAt.Local().Format(time.DateTime)
		}
		files := strings.Join(slices.DeleteFunc([]string{l.TiersFile, l.RecordsFile}, func(f string) bool { return f == "" }), ", ")
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%d\t%s\n", l.LoadID, finished, l.RecordsAccepted, l.RecordsRedelivered,
			l.RowsRejected, l.RecordsPruned, files)
	}
	for _, id := range s.MissingLoads {
		fmt.Fprintf(tw, "%d\tNOT PRESENT\t\t\t\t\t\n", id)
	}
	tw.Flush()
}

// statusFilter narrows the contracts status lists: to some states, and
// to at most limit rows (0: all). The totals and workers stay the whole
// cluster's.
type statusFilter struct {
	states []string
	limit  int
}

// listedByDefault is how many contracts plain status lists unless
// --limit says otherwise; --json lists every one unless --limit is given.
const listedByDefault = 100

// validate refuses a state status never reports.
func (f statusFilter) validate() error {
	for _, s := range f.states {
		if !slices.Contains(knownStates, s) {
			return usageError("--state %q: want one of %s", s, strings.Join(knownStates, ", "))
		}
	}
	return nil
}

// apply filters s.Partitions, counting in s.Unlisted those of the states
// asked for that the limit leaves out.
func (f statusFilter) apply(s *statusJSON) {
	if len(f.states) > 0 {
		s.Partitions = slices.DeleteFunc(s.Partitions, func(p partitionJSON) bool { return !slices.Contains(f.states, p.State) })
	}
	if f.limit > 0 && len(s.Partitions) > f.limit {
		s.Unlisted = len(s.Partitions) - f.limit
		s.Partitions = s.Partitions[:f.limit]
	}
}

// knownStates are the states status reports (statesHelp).
var knownStates = append(slices.Clone(stateOrder), report.StateInconsistent)
