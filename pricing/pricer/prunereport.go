package pricer

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/batonhq/baton/internal/noun"
)

// PruneReport is the outcome of PruneLoads as "worker prune --json"
// prints it: stable field names.
type PruneReport struct {
	DryRun bool `json:"dry_run"`
	// Loads is one entry per load named or found, with its outcome:
	// pruned, would_prune, skipped, already_pruned, not_found,
	// interrupted.
	Loads     []PruneReportLoad `json:"loads"`
	Records   int64             `json:"records"` // removed (would be, with DryRun), with as many priced rows
	ElapsedMS int64             `json:"elapsed_ms"`
	// LongestTransactionMS is the longest of the batch transactions.
	LongestTransactionMS int64 `json:"longest_transaction_ms"`
	Transactions         int   `json:"transactions"`
}

// PruneReportLoad is one load's outcome in a PruneReport.
type PruneReportLoad struct {
	LoadPrune
	LongestTransactionMS int64 `json:"longest_transaction_ms"`
}

// NewPruneReport sums up res, the outcome of PruneLoads that took elapsed.
func NewPruneReport(res []LoadPrune, elapsed time.Duration, dryRun bool) PruneReport {
	out := PruneReport{DryRun: dryRun, Loads: []PruneReportLoad{}, ElapsedMS: elapsed.Milliseconds()}
	for _, lp := range res {
		out.Loads = append(out.Loads, PruneReportLoad{LoadPrune: lp, LongestTransactionMS: lp.LongestBatch.Milliseconds()})
		out.Records += lp.Records
		out.Transactions += lp.Batches
		out.LongestTransactionMS = max(out.LongestTransactionMS, lp.LongestBatch.Milliseconds())
	}
	return out
}

// IDs are the ids of the loads with this outcome (PruneSkipped, ...).
func (out PruneReport) IDs(outcome string) []string {
	var ids []string
	for _, l := range out.Loads {
		if l.Outcome == outcome {
			ids = append(ids, strconv.FormatInt(l.LoadID, 10))
		}
	}
	return ids
}

// WriteText writes the report as "worker prune" prints it: a line for
// each load not pruned (skipped, missing, already pruned, interrupted)
// and a one-line summary.
func (out PruneReport) WriteText(w io.Writer) {
	var done, contracts int64
	for _, l := range out.Loads {
		switch l.Outcome {
		case PruneDone, PruneWould:
			done++
			contracts += l.Contracts
		case PruneSkipped:
			fmt.Fprintf(w, "load %d: skipped: %s\n", l.LoadID, strings.TrimPrefix(l.Reason, fmt.Sprintf("load %d: ", l.LoadID)))
		case PruneNotFound:
			fmt.Fprintf(w, "load %d: not found\n", l.LoadID)
		case PruneAlready:
			fmt.Fprintf(w, "load %d: already pruned\n", l.LoadID)
		case PruneInterrupted:
			fmt.Fprintf(w, "load %d: interrupted after %s; run the same command again to carry on\n", l.LoadID, noun.Count(l.Records, "record", "records"))
		}
	}
	elapsed := (time.Duration(out.ElapsedMS) * time.Millisecond).Round(time.Millisecond)
	if out.DryRun {
		fmt.Fprintf(w, "would prune %s: %s and their priced rows, of %s (dry run: nothing removed)\n",
			noun.Count(done, "load", "loads"), noun.Count(out.Records, "record", "records"), noun.Count(contracts, "contract", "contracts"))
		return
	}
	fmt.Fprintf(w, "pruned %s: %s and their priced rows, of %s, in %s (%s, the longest %s)\n",
		noun.Count(done, "load", "loads"), noun.Count(out.Records, "record", "records"), noun.Count(contracts, "contract", "contracts"),
		elapsed, noun.Count(int64(out.Transactions), "transaction", "transactions"),
		(time.Duration(out.LongestTransactionMS) * time.Millisecond).String())
}
