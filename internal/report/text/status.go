// Package text renders a status (package report) for people: the plain
// table of "worker status" (Print), and the live view of "worker status
// --watch" and the demo (Live, Watch), which fits the terminal it is drawn
// on and redraws in place; and the table of "worker schedule list"
// (PrintJobs).
package text

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/batonhq/baton/horizon"
	"github.com/batonhq/baton/internal/noun"
	"github.com/batonhq/baton/internal/report"
)

// Print writes the plain status: a table of contracts, the totals by
// state, the live workers, the backlog, what holds back vacuum, and the
// loads asked for.
func Print(w io.Writer, s report.Status) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONTRACT\tSTATE\tOWNER\tVERSION\tHEARTBEAT\tPROCESSED\tPENDING\tETA\tSEGMENTS\tATTEMPTS\tERROR")
	for _, p := range s.Partitions {
		owner, hb, errText := "-", "-", "-"
		if p.Owner != nil {
			owner = *p.Owner
		}
		if p.HeartbeatAgeMS != nil {
			hb = (time.Duration(*p.HeartbeatAgeMS) * time.Millisecond).Round(time.Millisecond).String() + " ago"
		}
		if p.Error != nil {
			errText = strings.Join(strings.Fields(*p.Error), " ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%s\t%s\t%d\t%s\n", p.ContractID, p.State, owner, p.Version, hb, p.Processed, p.Pending,
			etaText(p), segmentsText(p), p.Attempts, errText)
	}
	tw.Flush()
	if s.Unlisted > 0 {
		fmt.Fprintf(w, "… %d more not listed (--limit 0 lists all, --state narrows)\n", s.Unlisted)
	}
	fmt.Fprintf(w, "\n%d contracts, %d records priced, %d pending\n", s.Totals.Partitions, s.Totals.Processed, s.Totals.Pending)
	fmt.Fprintf(w, "by state: %s\n", byState(s.Totals.ByState))
	fmt.Fprintf(w, "\n%d live workers\n", len(s.Workers))
	if len(s.Workers) > 0 {
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "WORKER\tHOST\tPID\tMODE\tWAKE\tHELD\tHEARTBEAT")
		for _, wk := range s.Workers {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%s ago\n", wk.ID, wk.Host, wk.PID, wk.Mode, wk.Wake, wk.Held,
				(time.Duration(wk.HeartbeatAgeMS) * time.Millisecond).Round(time.Millisecond))
		}
		tw.Flush()
	}
	printPaused(w, s.Paused)
	printGenerations(w, s.Generations)
	printBacklog(w, s.Backlog)
	printHorizon(w, s.Horizon)
	printLoads(w, s)
}

// segmentsText is a contract's segments not caught up, for the status
// table: "-" for none, else how many and how many are held.
func segmentsText(p report.Contract) string {
	if p.Segments == 0 {
		return "-"
	}
	return fmt.Sprintf("%d (%d held)", p.Segments, p.SegmentsHeld)
}

// printHorizon writes what holds back vacuum: a WARNING line first when
// the threshold is passed, then the oldest holders and the dead row
// versions of baton's tables.
func printHorizon(w io.Writer, h *horizon.View) {
	if h == nil {
		return
	}
	fmt.Fprintln(w)
	if h.Warning {
		fmt.Fprintf(w, "WARNING: %s. Dead row versions of the task rows cannot be vacuumed meanwhile and pricing slows down: end that session (SELECT pg_terminate_backend(pid)) or run such reports on a standby\n", h.Reason)
	}
	if len(h.Holders) == 0 {
		fmt.Fprintln(w, "xmin horizon: nothing holds it back")
	} else {
		fmt.Fprintf(w, "xmin horizon held back by (oldest first; warning after %s):\n", time.Duration(h.WarnAfterMS)*time.Millisecond)
		for i, x := range h.Holders {
			if i == 3 {
				fmt.Fprintf(w, "  … and %d more (status --json lists them)\n", len(h.Holders)-3)
				break
			}
			age := "age unknown"
			if x.AgeMS != nil {
				age = "open " + (time.Duration(*x.AgeMS) * time.Millisecond).Round(time.Second).String()
			}
			fmt.Fprintf(w, "  %s, %d xids back: %s\n", age, x.XIDAge, x.Describe())
		}
	}
	if h.Hidden > 0 {
		fmt.Fprintf(w, "  %d sessions of other roles hold it too; grant pg_read_all_stats to see who\n", h.Hidden)
	}
	var parts []string
	for _, t := range h.Tables {
		if t.Dead > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", t.Name, t.Dead))
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "none")
	}
	fmt.Fprintf(w, "dead row versions: %d (%s)\n", h.DeadRows, strings.Join(parts, ", "))
}

// etaText is a contract's ETA for the status table.
func etaText(p report.Contract) string {
	switch {
	case p.ETAMS == nil:
		return "-"
	case *p.ETAMS == 0:
		return "now"
	default:
		return "in " + shortDuration(time.Duration(*p.ETAMS)*time.Millisecond)
	}
}

// shortDuration rounds d for reading: seconds under an hour, minutes
// beyond.
func shortDuration(d time.Duration) string {
	if d >= time.Hour {
		return d.Round(time.Minute).String()
	}
	return d.Round(time.Second).String()
}

// printGenerations writes the re-pricings in flight and the previews
// waiting, when there are any.
func printGenerations(w io.Writer, g *report.Generations) {
	if g == nil || g.Repricing == 0 && g.PreviewsWaiting == 0 {
		return
	}
	fmt.Fprintln(w)
	if g.Repricing > 0 {
		fmt.Fprintf(w, "re-pricing: %s (exports show the previous generation until each catches up)\n",
			noun.Count(g.Repricing, "contract", "contracts"))
	}
	if g.PreviewsWaiting > 0 {
		fmt.Fprintf(w, "previews waiting: %d (worker generations approve|discard; worker diff --preview)\n", g.PreviewsWaiting)
	}
}

// printBacklog writes the backlog signals.
func printBacklog(w io.Writer, b *report.Backlog) {
	if b == nil {
		return
	}
	rate, drain := "unknown (no sample a minute old yet)", "unknown"
	if b.RatePerSecond != nil {
		rate = fmt.Sprintf("%.1f records/s over the last %s", *b.RatePerSecond, shortDuration(time.Duration(b.RateWindowMS)*time.Millisecond))
		drain = "never at this rate"
	}
	if b.DrainMS != nil {
		drain = shortDuration(time.Duration(*b.DrainMS) * time.Millisecond)
	}
	fmt.Fprintf(w, "\nbacklog: %d records pending in %d contracts (%d quarantined in %d); lag %s\n",
		b.PendingItems, b.PendingContracts, b.QuarantinedItems, b.QuarantinedContracts,
		shortDuration(time.Duration(b.LagMS)*time.Millisecond))
	fmt.Fprintf(w, "rate: %s; drains in %s; %d workers would drain it within %s (%d live)\n",
		rate, drain, b.WorkersNeeded, shortDuration(time.Duration(b.DrainTargetMS)*time.Millisecond), b.LiveWorkers)
}

// printLoads writes the loads table of status --loads.
func printLoads(w io.Writer, s report.Status) {
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
