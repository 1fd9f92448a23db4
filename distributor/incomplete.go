package distributor

import "fmt"

// IncompleteError is Run's error in until-done mode when it finished but
// some partitions are quarantined with work left. It wraps ErrIncomplete,
// so errors.Is(err, ErrIncomplete) finds it; callers that want the count
// read it with errors.As.
type IncompleteError struct {
	// Quarantined is how many partitions (task rows: a partition split
	// into segments counts each quarantined segment) are quarantined.
	Quarantined int
}

func (e *IncompleteError) Error() string {
	return fmt.Sprintf("%v: %d partition(s) quarantined; see status, then retry", ErrIncomplete, e.Quarantined)
}

func (e *IncompleteError) Unwrap() error { return ErrIncomplete }
