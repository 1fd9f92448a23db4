package main

import (
	"encoding/csv"
	"encoding/json"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/batonhq/baton/internal/clienv"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/report"
)

// Previews from the command line: a tier change loaded with --preview is
// priced without changing the export; generations and diff --preview show
// it with its totals and change; approve makes it the export; a reprice
// --preview is discarded, leaving the export as it was.
func TestPreviewCommands(t *testing.T) {
	t.Parallel()
	c, golden := pricedWithoutDiscounts(t)
	first := c.mustRun("export", "--out", "-", "--complete")

	if _, errs, code := c.run("load", "--records", vectorsDir+"records.csv", "--preview"); code != clienv.ExitUsage || !strings.Contains(errs, "--reprice") {
		t.Fatalf("--preview without --reprice or --amend: exit %d\n%s", code, errs)
	}
	c.mustRun("load", "--tiers", vectorsDir+"tiers.csv", "--reprice", "--preview", "--reason", "what if")
	if _, errs, code := c.run("reprice", "random-mix"); code != clienv.ExitUsage || !strings.Contains(errs, "approve") {
		t.Fatalf("reprice of a contract with a preview waiting: exit %d\n%s", code, errs)
	}
	c.mustRun("run", "--until-done", "--heartbeat", "100ms", "--stale-after", "1s")
	if got := c.mustRun("export", "--out", "-", "--complete"); got != first {
		t.Fatal("export changed while the previews wait")
	}
	if got := c.mustRun("export", "--out", "-", "--generation", "preview"); got != string(golden) {
		t.Fatal("export of the previews differs from expected.csv")
	}

	var gens []struct {
		Contract   string `json:"contract_id"`
		Generation int64  `json:"generation"`
		State      string `json:"state"`
		NetTotal   int64  `json:"net_total"`
		NetChange  *int64 `json:"net_change"`
	}
	if err := json.Unmarshal([]byte(c.mustRun("generations", "--json", "random-mix")), &gens); err != nil {
		t.Fatal(err)
	}
	if len(gens) != 2 || gens[1].State != "preview" || gens[1].NetChange == nil || *gens[1].NetChange >= 0 {
		t.Fatalf("generations of random-mix: %+v", gens)
	}
	if _, errs, code := c.run("generations", "random-mix"); code != 0 || !strings.Contains(errs, "preview: contract random-mix generation 2") ||
		!strings.Contains(errs, "caught up") {
		t.Fatalf("generations of random-mix: exit %d\n%s", code, errs)
	}

	out, errs, code := c.run("diff", "--preview", "--contract", "random-mix")
	if code != 0 {
		t.Fatalf("diff --preview: exit %d\n%s", code, errs)
	}
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var change int64
	for _, r := range rows[1:] {
		o, err1 := strconv.ParseInt(r[4], 10, 64)
		n, err2 := strconv.ParseInt(r[7], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("diff row %v", r)
		}
		change += n - o
	}
	if change != *gens[1].NetChange || !strings.Contains(errs, "generation 1 net total") {
		t.Fatalf("diff --preview rows change the net by %d, the preview by %d\n%s", change, *gens[1].NetChange, errs)
	}

	// status flags the previews waiting, in text and in JSON, until they
	// are decided.
	if out := c.mustRun("status"); !strings.Contains(out, "\npreviews waiting: 11 (worker generations approve|discard") ||
		strings.Contains(out, "re-pricing:") {
		t.Fatalf("status with 11 previews waiting:\n%s", out)
	}
	if g := statusGenerations(t, c); g.Repricing != 0 || g.PreviewsWaiting != 11 {
		t.Fatalf("status --json generations with 11 previews waiting: %+v", g)
	}
	if out := c.mustRun("generations", "approve"); !strings.HasPrefix(out, "approve: 11 previews approved (11 current now") {
		t.Fatalf("approve:\n%s", out)
	}
	if out := c.mustRun("status"); strings.Contains(out, "previews waiting") {
		t.Fatalf("status after the previews were approved:\n%s", out)
	}
	if g := statusGenerations(t, c); g.Repricing != 0 || g.PreviewsWaiting != 0 {
		t.Fatalf("status --json generations after approval: %+v", g)
	}
	if got := c.mustRun("export", "--out", "-", "--complete"); got != string(golden) {
		t.Fatal("export after approval differs from expected.csv")
	}

	if out := c.mustRun("reprice", "--preview", "random-mix"); !strings.HasPrefix(out, "reprice: 1 contract previewed") {
		t.Fatalf("reprice --preview:\n%s", out)
	}
	if _, errs, code := c.run("generations", "discard", "basic-3-tiers"); code != clienv.ExitUsage || !strings.Contains(errs, "no preview") {
		t.Fatalf("discard of a contract without a preview: exit %d\n%s", code, errs)
	}
	var decided struct {
		Previews int `json:"previews"`
	}
	if err := json.Unmarshal([]byte(c.mustRun("generations", "discard", "--json", "random-mix")), &decided); err != nil || decided.Previews != 1 {
		t.Fatalf("discard --json: %+v, %v", decided, err)
	}
	c.mustRun("run", "--until-done", "--heartbeat", "100ms", "--stale-after", "1s")
	if got := c.mustRun("export", "--out", "-", "--complete"); got != string(golden) {
		t.Fatal("export after a discarded preview differs from expected.csv")
	}
}

// The console's overview lists the previews waiting, with their change,
// and a contract's page shows its preview among its generations.
func TestConsoleShowsPreviews(t *testing.T) {
	t.Parallel()
	c := cli{t, pgtest.NewURL(t)}
	c.mustRun("load", "--tiers", vectorsDir+"tiers.csv", "--records", vectorsDir+"records.csv")
	c.mustRun("run", "--until-done", "--heartbeat", "100ms", "--stale-after", "1s")
	base := serveConsole(t, c.command("ui", "--addr", "127.0.0.1:0", "--log-format", "json"))
	if _, body := get(t, base+"/"); strings.Contains(body, `id="previews"`) {
		t.Error("the overview lists previews before there are any")
	}
	c.mustRun("reprice", "--preview", "--reason", "same tiers", "basic-3-tiers")
	c.mustRun("run", "--until-done", "--heartbeat", "100ms", "--stale-after", "1s")
	code, body := get(t, base+"/")
	if code != http.StatusOK {
		t.Fatalf("overview = %d:\n%s", code, body)
	}
	// The same tiers price the same nets: the change is 0.
	for _, want := range []string{`id="previews"`, `href="/contracts/basic-3-tiers"`, "caught up", `class="num preview-change">0<`} {
		if !strings.Contains(body, want) {
			t.Errorf("overview lacks %q", want)
		}
	}
	if _, body := get(t, base+"/contracts/basic-3-tiers"); !strings.Contains(body, `class="state preview"`) {
		t.Error("the contract's page does not show its preview")
	}
}

// zeroDiscountTiers writes the golden tiers with every discount 0.
func zeroDiscountTiers(t *testing.T) string {
	t.Helper()
	tiers, err := os.ReadFile(vectorsDir + "tiers.csv")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(tiers), "\n"), "\n")
	for i := 1; i < len(lines); i++ {
		f := strings.Split(lines[i], ",")
		f[2] = "0"
		lines[i] = strings.Join(f, ",")
	}
	return writeFile(t, "tiers0.csv", strings.Join(lines, "\n")+"\n")
}

// statusGenerations is status --json's count of re-pricings in flight and
// previews waiting.
func statusGenerations(t *testing.T, c cli) report.Generations {
	t.Helper()
	var st report.Status
	if err := json.Unmarshal([]byte(c.mustRun("status", "--json")), &st); err != nil || st.Generations == nil {
		t.Fatalf("status --json: %v, generations %v", err, st.Generations)
	}
	return *st.Generations
}
