package text

import (
	"cmp"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/batonhq/baton/internal/noun"
	"github.com/batonhq/baton/pricing/rerate"
)

// The outcomes of re-rating (package rerate) as the worker command prints them: a line for
// people, or the same as JSON (the exported fields' tags).

// StartReport is what a re-pricing started: each contract's outcome, how
// many got a new generation and how many had nothing priced to re-price.
type StartReport struct {
	Started   []rerate.Started `json:"contracts"`
	Repricing int              `json:"repricing"` // contracts with a new generation
	Unchanged int              `json:"unchanged"` // contracts with nothing priced to re-price
}

// NewStartReport counts what a re-pricing started.
func NewStartReport(started []rerate.Started) StartReport {
	r := StartReport{Started: started}
	if r.Started == nil {
		r.Started = []rerate.Started{}
	}
	for _, s := range started {
		if s.Generation > 0 {
			r.Repricing++
		} else {
			r.Unchanged++
		}
	}
	return r
}

// WriteText writes r as one line, for a preview or not.
func (r StartReport) WriteText(w io.Writer, command string, preview bool) {
	if preview {
		fmt.Fprintf(w, "%s: %s previewed as a new generation (worker generations approve|discard)\n",
			command, noun.Count(int64(r.Repricing), "contract", "contracts"))
		return
	}
	fmt.Fprintf(w, "%s: %s re-pricing as a new generation, %d with nothing priced to re-price\n",
		command, noun.Count(int64(r.Repricing), "contract", "contracts"), r.Unchanged)
}

// DecideReport is what rerate's Approve or Discard did: the previews decided and,
// of those approved, how many became current at once (Current) and how
// many are priced on to become current once caught up (Pricing).
type DecideReport struct {
	Contracts []rerate.Decided `json:"contracts"`
	Previews  int              `json:"previews"`
	Current   int              `json:"current,omitempty"`
	Pricing   int              `json:"pricing,omitempty"`
	verb      string
}

// NewDecideReport counts what rerate's Approve (verb "approve") or
// Discard ("discard") returned.
func NewDecideReport(verb string, decided []rerate.Decided) DecideReport {
	r := DecideReport{Contracts: decided, Previews: len(decided), verb: verb}
	if r.Contracts == nil {
		r.Contracts = []rerate.Decided{}
	}
	for _, d := range decided {
		if d.Pricing {
			r.Pricing++
		} else if verb == "approve" {
			r.Current++
		}
	}
	return r
}

// Decision is what verb ("approve", "discard") did to a preview:
// "approved", "discarded".
func Decision(verb string) string { return strings.TrimSuffix(verb, "e") + "ed" }

// WriteText writes r as one line.
func (r DecideReport) WriteText(w io.Writer) {
	fmt.Fprintf(w, "%s: %s %s", r.verb, noun.Count(int64(r.Previews), "preview", "previews"), Decision(r.verb))
	if r.verb == "approve" && r.Previews > 0 {
		fmt.Fprintf(w, " (%d current now, %d being priced to become current once caught up)", r.Current, r.Pricing)
	}
	fmt.Fprintln(w)
}

// WritePreviews writes a line for each preview: its totals, its change
// from the current generation, how far it is priced, and what decides it.
func WritePreviews(w io.Writer, previews []rerate.Preview) {
	for _, p := range previews {
		progress := "caught up"
		if !p.CaughtUp {
			progress = fmt.Sprintf("priced %d of %d records so far", p.Priced, p.Records)
		}
		fmt.Fprintf(w, "preview: contract %s generation %d: net total %d (%+d from generation %d), %s; worker generations approve|discard %s\n",
			p.Contract, p.Generation, p.NetTotal, p.NetChange, p.Current, progress, p.Contract)
	}
}

// DiffHeader is the header of the CSV WriteDiff writes.
const DiffHeader = "contract_id,record_id,old_gross_minor,old_discount_minor,old_net_minor,new_gross_minor,new_discount_minor,new_net_minor"

// WriteDiff writes s.Diff's changes of contracts (all when empty) as CSV to
// w, or with preview s.DiffPreview's, and each contract's totals and a
// summary line to summary. It returns the number of changed records.
func WriteDiff(ctx context.Context, s *rerate.Store, w, summary io.Writer, contracts []string, preview bool) (int64, error) {
	if _, err := io.WriteString(w, DiffHeader+"\n"); err != nil {
		return 0, err
	}
	cw := csv.NewWriter(w)
	var n int64
	diff := s.Diff
	if preview {
		diff = s.DiffPreview
	}
	diffs, err := diff(ctx, contracts, func(c rerate.Change) error {
		n++
		return cw.Write(c.Columns())
	})
	if err != nil {
		return n, err
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return n, fmt.Errorf("writing the diff: %w", err)
	}
	for _, d := range diffs {
		fmt.Fprintf(summary, "contract %s: generation %d net total %d, generation %d net total %d (%+d), %s changed\n",
			d.Contract, d.Previous, d.OldNetTotal, d.Current, d.NewNetTotal, d.NewNetTotal-d.OldNetTotal,
			noun.Count(d.ChangedRecords, "record", "records"))
	}
	fmt.Fprintf(summary, "diff: %s of %s\n", noun.Count(n, "changed record", "changed records"),
		noun.Count(int64(len(diffs)), "re-priced contract", "re-priced contracts"))
	return n, nil
}

// WriteGenerations writes gens as a table, a row each.
func WriteGenerations(w io.Writer, gens []rerate.Generation) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONTRACT\tGENERATION\tSTATE\tREQUESTED\tPRICING_STARTED\tFINISHED\tFROM_SEQ\tRECORDS\tNET_TOTAL\tSTARTED_BY\tREASON")
	for _, x := range gens {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", x.Contract, x.Generation, x.State,
			x.StartedAt.UTC().Format(time.RFC3339), timeCell(x.PricingStartedAt), timeCell(x.FinishedAt), x.FromSeq, x.Records, x.NetTotal,
			cmp.Or(x.StartedBy, "-"), x.Reason)
	}
	return tw.Flush()
}

// timeCell formats t for a table cell, "-" if nil.
func timeCell(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// WritePruned writes what "worker prune --generations-older-than" pruned
// as one line, "would prune" with dryRun (p is then rerate's PrunePlan's).
func WritePruned(w io.Writer, p rerate.Pruned, olderThan time.Duration, dryRun bool) {
	verb := "pruned"
	if dryRun {
		verb = "would prune"
	}
	fmt.Fprintf(w, "%s %s and their %s (replaced more than %s ago)\n", verb,
		noun.Count(p.Generations, "generation", "generations"), noun.Count(p.Rows, "priced row", "priced rows"), olderThan)
}
