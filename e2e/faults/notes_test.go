package faults

import (
	"fmt"
	"os"
	"sync"
)

// Lines a test adds to the suite summary beside the fault counts: figures of
// its own (the soak's violations, the time to progress after a failover).
var (
	notesMu sync.Mutex
	notes   []string
)

func note(format string, args ...any) {
	notesMu.Lock()
	defer notesMu.Unlock()
	notes = append(notes, fmt.Sprintf(format, args...))
}

// printNotes writes the notes after the summary.
func printNotes() {
	notesMu.Lock()
	defer notesMu.Unlock()
	for _, n := range notes {
		fmt.Fprintf(os.Stderr, "  %s\n", n)
	}
}
