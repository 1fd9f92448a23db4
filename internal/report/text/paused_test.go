package text

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/report"
)

// A pause of a whole kind and one of a contract, each on its own line;
// nothing at all without pauses.
func TestPrintPaused(t *testing.T) {
	t.Parallel()
	var none bytes.Buffer
	printPaused(&none, nil)
	if none.Len() != 0 {
		t.Errorf("no pauses printed %q", none.String())
	}
	c := "c-17"
	since := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	var b bytes.Buffer
	printPaused(&b, []report.Paused{
		{Kind: "pricing", Since: since, AgeMS: 90_000, By: "ops", Reason: "freeze"},
		{ContractID: &c, Kind: "pricing", Since: since, AgeMS: 1_500, By: "ann", Reason: "tiers under review"},
	})
	for _, want := range []string{"2 paused", "every contract of kind pricing", "2026-11-01T12:00:00Z  1m30s", "c-17", "2s", "tiers under review"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("pauses lack %q:\n%s", want, b.String())
		}
	}
}

// The states' help names every state a contract can be in.
func TestStatesHelpNamesEveryState(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"pending", "confirming", "active", "caught_up", "stale", "backoff", "quarantined", "done", report.StateInconsistent} {
		if !strings.Contains(StatesHelp, "\n  "+s+" ") {
			t.Errorf("StatesHelp lacks state %s", s)
		}
	}
}
