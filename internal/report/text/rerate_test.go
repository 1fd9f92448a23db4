package text_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/report/text"
	"github.com/batonhq/baton/pricing/rerate"
)

// The outcome lines and their JSON count what was started and decided.
func TestStartAndDecideReports(t *testing.T) {
	started := text.NewStartReport([]rerate.Started{{Contract: "a", Generation: 2}, {Contract: "b"}, {Contract: "c", Generation: 3}})
	var b strings.Builder
	started.WriteText(&b, "reprice", false)
	started.WriteText(&b, "load", true)
	want := "reprice: 2 contracts re-pricing as a new generation, 1 with nothing priced to re-price\n" +
		"load: 2 contracts previewed as a new generation (worker generations approve|discard)\n"
	if b.String() != want {
		t.Errorf("start report:\n%s\nwant\n%s", b.String(), want)
	}
	if j, _ := json.Marshal(text.NewStartReport(nil)); string(j) != `{"contracts":[],"repricing":0,"unchanged":0}` {
		t.Errorf("empty start report as JSON: %s", j)
	}

	approved := text.NewDecideReport("approve", []rerate.Decided{{Contract: "a"}, {Contract: "b", Pricing: true}})
	discarded := text.NewDecideReport("discard", []rerate.Decided{{Contract: "c"}})
	b.Reset()
	approved.WriteText(&b)
	discarded.WriteText(&b)
	text.NewDecideReport("approve", nil).WriteText(&b)
	want = "approve: 2 previews approved (1 current now, 1 being priced to become current once caught up)\n" +
		"discard: 1 preview discarded\n" +
		"approve: 0 previews approved\n"
	if b.String() != want {
		t.Errorf("decide reports:\n%s\nwant\n%s", b.String(), want)
	}
	if j, _ := json.Marshal(discarded); string(j) != `{"contracts":[{"contract_id":"c","generation":0,"current_generation":0}],"previews":1}` {
		t.Errorf("discard report as JSON: %s", j)
	}
}

// Previews and generations are written a line and a row each.
func TestWritePreviewsAndGenerations(t *testing.T) {
	var b strings.Builder
	text.WritePreviews(&b, []rerate.Preview{
		{Contract: "a", Generation: 3, Current: 2, CaughtUp: true, NetTotal: 900, NetChange: -100},
		{Contract: "b", Generation: 2, Current: 1, Priced: 4, Records: 10, NetTotal: 50, NetChange: 7},
	})
	want := "preview: contract a generation 3: net total 900 (-100 from generation 2), caught up; worker generations approve|discard a\n" +
		"preview: contract b generation 2: net total 50 (+7 from generation 1), priced 4 of 10 records so far; worker generations approve|discard b\n"
	if b.String() != want {
		t.Errorf("previews:\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	if err := text.WriteGenerations(&b, []rerate.Generation{
		{Contract: "a", Generation: 2, State: "current", StartedAt: at, FinishedAt: &at, Records: 5, NetTotal: 900, Reason: "tiers fixed"},
	}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "CONTRACT") ||
		strings.Join(strings.Fields(lines[1]), " ") != "a 2 current 2026-11-30T12:00:00Z - 2026-11-30T12:00:00Z 0 5 900 - tiers fixed" {
		t.Errorf("generations table:\n%s", b.String())
	}
}

func TestWritePruned(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	text.WritePruned(&b, rerate.Pruned{Generations: 1, Rows: 3}, 48*time.Hour, false)
	text.WritePruned(&b, rerate.Pruned{Generations: 2, Rows: 1}, 0, true)
	want := "pruned 1 generation and their 3 priced rows (replaced more than 48h0m0s ago)\n" +
		"would prune 2 generations and their 1 priced row (replaced more than 0s ago)\n"
	if b.String() != want {
		t.Errorf("WritePruned wrote\n%s\nwant\n%s", b.String(), want)
	}
}
