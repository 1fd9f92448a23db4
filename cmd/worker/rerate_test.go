package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batonhq/baton/internal/clienv"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/report/text"
)

const vectorsDir = "../../testdata/vectors/"

// Re-rating from the command line: a tier change is refused naming
// --reprice, applied with it; the export becomes the golden file, the
// previous generation's is the first export, diff lists the changed
// records, generations the states, and prune removes only generations

// pricedWithoutDiscounts loads the golden vectors' records under tiers
// without discounts into a database of its own and prices them; it
// returns the CLI on that database and the golden output (the output with
// the real tiers).
func pricedWithoutDiscounts(t *testing.T) (cli, []byte) {
	t.Helper()
	c := cli{t, pgtest.NewURL(t)}
	golden, err := os.ReadFile(vectorsDir + "expected.csv")
	if err != nil {
		t.Fatal(err)
	}
	c.mustRun("load", "--tiers", zeroDiscountTiers(t), "--records", vectorsDir+"records.csv")
	c.mustRun("run", "--until-done", "--heartbeat", "100ms", "--stale-after", "1s")
	return c, golden
}

// older than asked.
func TestRerateCommands(t *testing.T) {
	t.Parallel()
	c, golden := pricedWithoutDiscounts(t)
	first := c.mustRun("export", "--out", "-")

	if _, errs, code := c.run("load", "--tiers", vectorsDir+"tiers.csv"); code != clienv.ExitBadInput || !strings.Contains(errs, "--reprice") {
		t.Fatalf("tier change without --reprice: exit %d\n%s", code, errs)
	}
	if _, errs, code := c.run("load", "--records", vectorsDir+"records.csv", "--reprice"); code != clienv.ExitUsage || !strings.Contains(errs, "--tiers") {
		t.Fatalf("--reprice without --tiers: exit %d\n%s", code, errs)
	}
	out := c.mustRun("load", "--tiers", vectorsDir+"tiers.csv", "--reprice", "--reason", "tiers corrected")
	if !strings.Contains(out, "0 records amended, 11 contracts re-pricing") {
		t.Fatalf("load --reprice summary:\n%s", out)
	}
	if _, errs, code := c.run("reprice", "no-such-contract"); code != clienv.ExitUsage || !strings.Contains(errs, "unknown contract") {
		t.Fatalf("reprice of an unknown contract: exit %d\n%s", code, errs)
	}
	if _, _, code := c.run("reprice"); code != clienv.ExitUsage {
		t.Fatalf("reprice without contracts: exit %d", code)
	}
	if out := c.mustRun("status"); !strings.Contains(out, "\nre-pricing: 11 contracts (exports show the previous generation") {
		t.Fatalf("status with 11 contracts re-pricing:\n%s", out)
	}
	c.mustRun("run", "--until-done", "--heartbeat", "100ms", "--stale-after", "1s")
	if g := statusGenerations(t, c); g.Repricing != 0 || g.PreviewsWaiting != 0 {
		t.Fatalf("status --json generations once re-priced: %+v", g)
	}
	if got := c.mustRun("export", "--out", "-", "--complete"); got != string(golden) {
		t.Fatal("export after re-pricing differs from expected.csv")
	}
	if got := c.mustRun("export", "--out", "-", "--generation", "previous"); got != first {
		t.Fatal("export of the previous generation differs from the first export")
	}
	diffOut := filepath.Join(t.TempDir(), "diff.csv")
	c.mustRun("diff", "--out", diffOut)
	d, err := os.ReadFile(diffOut)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(d, []byte(text.DiffHeader+"\n")) || bytes.Count(d, []byte("\n")) < 2 {
		t.Fatalf("diff:\n%.300s", d)
	}
	var gens []struct {
		Contract string `json:"contract_id"`
		State    string `json:"state"`
		Reason   string `json:"reason"`
	}
	if err := json.Unmarshal([]byte(c.mustRun("generations", "--json", "random-mix")), &gens); err != nil {
		t.Fatal(err)
	}
	if len(gens) != 2 || gens[0].State != "superseded" || gens[1].State != "current" || gens[1].Reason != "tiers corrected" {
		t.Fatalf("generations of random-mix: %+v", gens)
	}
	if table := c.mustRun("generations", "random-mix"); !strings.Contains(table, "PRICING_STARTED") || !strings.Contains(table, "STARTED_BY") ||
		!strings.Contains(table, "tiers corrected") {
		t.Fatalf("generations table of random-mix:\n%s", table)
	}

	// worker reprice under the current tiers: a third generation, same
	// output.
	if out := c.mustRun("reprice", "random-mix", "--reason", "check"); !strings.HasPrefix(out, "reprice: 1 contract re-pricing") {
		t.Fatalf("reprice summary:\n%s", out)
	}
	c.mustRun("run", "--until-done", "--heartbeat", "100ms", "--stale-after", "1s")
	if got := c.mustRun("export", "--out", "-", "--complete"); got != string(golden) {
		t.Fatal("export after reprice differs from expected.csv")
	}
	if out := c.mustRun("prune", "--generations-older-than", "1h"); !strings.HasPrefix(out, "pruned 0 generations") {
		t.Fatalf("prune of generations older than an hour:\n%s", out)
	}
	if out := c.mustRun("prune", "--generations-older-than", "0s", "--dry-run"); !strings.HasPrefix(out, "would prune 12 generations") {
		t.Fatalf("dry run of the prune of every superseded generation:\n%s", out)
	}
	if out := c.mustRun("prune", "--generations-older-than", "0s"); !strings.HasPrefix(out, "pruned 12 generations") {
		t.Fatalf("prune of every superseded generation:\n%s", out)
	}
}

// The console's page of a re-priced contract lists its generations, with
// the reason and the change of its net total.
func TestConsoleShowsAContractsGenerations(t *testing.T) {
	t.Parallel()
	c := cli{t, pgtest.NewURL(t)}
	c.mustRun("load", "--tiers", vectorsDir+"tiers.csv", "--records", vectorsDir+"records.csv")
	c.mustRun("run", "--until-done", "--heartbeat", "100ms", "--stale-after", "1s")
	c.mustRun("reprice", "--reason", "audit of basic-3-tiers", "basic-3-tiers")
	c.mustRun("run", "--until-done", "--heartbeat", "100ms", "--stale-after", "1s")

	base := serveConsole(t, c.command("ui", "--addr", "127.0.0.1:0", "--log-format", "json"))
	code, body := get(t, base+"/contracts/basic-3-tiers")
	if code != http.StatusOK {
		t.Fatalf("contract page = %d:\n%s", code, body)
	}
	// The same tiers price the same nets: the change is 0.
	for _, want := range []string{`id="generations"`, "audit of basic-3-tiers", `class="state current"`, `class="state superseded"`,
		`class="num gen-change">0<`, `id="generation">2<`} {
		if !strings.Contains(body, want) {
			t.Errorf("the page of a re-priced contract lacks %q", want)
		}
	}
	if _, body := get(t, base+"/contracts/random-mix"); strings.Contains(body, `id="generations"`) {
		t.Errorf("the page of a contract never re-priced lists generations")
	}
}
