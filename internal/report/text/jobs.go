package text

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/batonhq/baton/schedule"
)

// PrintJobs writes the table of "worker schedule list": each job's state,
// owner, schedule, command (cut in the middle when long), and its next and
// last runs.
func PrintJobs(w io.Writer, jobs []schedule.Status) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tOWNER\tMODE\tSCHEDULE\tCOMMAND\tNEXT RUN\tLAST STARTED\tLAST FINISHED\tRESULT\tRUNS\tERROR")
	for _, j := range jobs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", j.Name, j.State, orDash(j.Owner), j.Mode,
			j.Schedule, FitMiddle(jobCommand(j), commandWidth), j.NextRun.Format(time.RFC3339), timeOrDash(j.LastRunStarted),
			timeOrDash(j.LastRunFinished), orDash(j.LastResult), j.Runs, orDash(oneLine(j.LastError)))
	}
	return tw.Flush()
}

// commandWidth is the most characters of a job's command the table shows:
// a longer one loses its middle, keeping the program and its last
// arguments.
const commandWidth = 48

// jobCommand is what a job runs, as a shell would take it (arguments
// quoted where needed), or "builtin NAME".
func jobCommand(j schedule.Status) string {
	if j.Builtin != "" {
		return "builtin " + j.Builtin
	}
	if len(j.Command) == 0 {
		return "-"
	}
	args := make([]string, len(j.Command))
	for i, a := range j.Command {
		args[i] = shellQuote(a)
	}
	return strings.Join(strings.Fields(strings.Join(args, " ")), " ")
}

// shellQuote quotes s for a POSIX shell unless it needs none.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func timeOrDash(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(time.RFC3339)
}

// oneLine puts s on one line of at most 80 characters.
func oneLine(s string) string {
	return Fit(strings.Join(strings.Fields(s), " "), 80)
}
