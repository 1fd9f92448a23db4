package text

import (
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/schedule"
)

// The jobs table quotes a command as a shell would take it, cuts a long
// one in the middle, names a built-in, and puts an error on one line.
func TestPrintJobs(t *testing.T) {
	t.Parallel()
	next := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var b strings.Builder
	err := PrintJobs(&b, []schedule.Status{
		{Name: "quoted", State: "idle", Mode: "lock", Schedule: "every 1h", NextRun: next, Command: []string{"sh", "-c", "echo it's"}},
		{Name: "long", State: "idle", Mode: "lock", Schedule: "every 1h", NextRun: next, Command: []string{"/usr/local/bin/report", strings.Repeat("x", 60), "--last"}},
		{Name: "builtin", State: "idle", Mode: "lock", Schedule: "every 1h", NextRun: next, Builtin: "verify", LastError: "two\nlines"},
	})
	if err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{`sh -c 'echo it'\''s'`, "/usr/local/bin/report", "…", "--last", "builtin verify", "two lines", "2026-01-02T03:04:05Z"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
