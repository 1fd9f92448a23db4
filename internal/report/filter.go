package report

import (
	"fmt"
	"slices"
	"strings"
)

// StateOrder lists the states of a contract, held ones first (what is
// being worked on now), then the backlog.
var StateOrder = []string{"confirming", "active", "caught_up", "stale", "backoff", "quarantined", "pending", "done"}

// States are every state status reports: StateOrder and StateInconsistent.
var States = append(slices.Clone(StateOrder), StateInconsistent)

// Filter narrows the contracts listed: to some states, and to at most
// Limit rows (0: all). The totals and workers stay the whole cluster's.
type Filter struct {
	States []string
	Limit  int
}

// Validate refuses a state status never reports.
func (f Filter) Validate() error {
	for _, s := range f.States {
		if !slices.Contains(States, s) {
			return fmt.Errorf("state %q: want one of %s", s, strings.Join(States, ", "))
		}
	}
	return nil
}

// Apply filters s.Partitions, counting in s.Unlisted those of the states
// asked for that the limit leaves out.
func (f Filter) Apply(s *Status) {
	if len(f.States) > 0 {
		s.Partitions = slices.DeleteFunc(s.Partitions, func(p Contract) bool { return !slices.Contains(f.States, p.State) })
	}
	if f.Limit > 0 && len(s.Partitions) > f.Limit {
		s.Unlisted = len(s.Partitions) - f.Limit
		s.Partitions = s.Partitions[:f.Limit]
	}
}
