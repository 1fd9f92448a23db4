package pricer

import (
	"errors"
	"fmt"
	"strings"

	"github.com/batonhq/baton/internal/noun"
	"github.com/batonhq/baton/partition"
)

// ErrNotPruned is wrapped by PruneReport.Err when loads were left (not all
// their records priced) or the pruning was interrupted: running the same
// prune again later carries on.
var ErrNotPruned = errors.New("not every load was pruned")

// Err is the error a prune with this outcome ends with: loads not found
// (wrapping partition.ErrNotFound), an interruption or loads skipped
// (wrapping ErrNotPruned), in that order; nil when every load was pruned
// or had been already.
func (out PruneReport) Err() error {
	missing, interrupted, skipped := out.IDs(PruneNotFound), out.IDs(PruneInterrupted), out.IDs(PruneSkipped)
	switch {
	case len(missing) > 0:
		return &wordedError{"no such load: " + strings.Join(missing, ", "), partition.ErrNotFound}
	case len(interrupted) > 0:
		return &wordedError{fmt.Sprintf("interrupted while pruning load %s: run the same command again to carry on", interrupted[0]), ErrNotPruned}
	case len(skipped) > 0:
		return &wordedError{fmt.Sprintf("%s (%s) not pruned: not all their records are priced yet",
			noun.Count(int64(len(skipped)), "load", "loads"), strings.Join(skipped, ", ")), ErrNotPruned}
	}
	return nil
}

// wordedError says what an error means for contracts (what a prune left,
// what an until-done run left), while errors.Is finds its cause.
type wordedError struct {
	msg   string
	cause error
}

func (e *wordedError) Error() string { return e.msg }
func (e *wordedError) Unwrap() error { return e.cause }
