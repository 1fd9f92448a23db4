package text

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/batonhq/baton/internal/report"
)

// printPaused writes the pauses in force as status shows them: nothing
// when there are none.
func printPaused(w io.Writer, ps []report.Paused) {
	if len(ps) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%d paused (worker resume lifts a pause)\n", len(ps))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PAUSED\tSINCE\tFOR\tBY\tREASON")
	for _, p := range ps {
		what := "every contract of kind " + p.Kind
		if p.ContractID != nil {
			what = *p.ContractID
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", what, p.Since.UTC().Format(time.RFC3339),
			(time.Duration(p.AgeMS) * time.Millisecond).Round(time.Second), p.By, p.Reason)
	}
	tw.Flush()
}
