package rerate

import (
	"fmt"
	"io"
	"time"

	"github.com/batonhq/baton/internal/noun"
)

// WriteText writes p as "worker prune --generations-older-than" prints it:
// one line, "would prune" with dryRun (p is then PrunePlan's).
func (p Pruned) WriteText(w io.Writer, olderThan time.Duration, dryRun bool) {
	verb := "pruned"
	if dryRun {
		verb = "would prune"
	}
	fmt.Fprintf(w, "%s %s and their %s (replaced more than %s ago)\n", verb,
		noun.Count(p.Generations, "generation", "generations"), noun.Count(p.Rows, "priced row", "priced rows"), olderThan)
}
