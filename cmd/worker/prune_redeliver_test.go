package main

import (
	"context"
	"strings"
	"testing"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/clienv"
	"github.com/batonhq/baton/internal/pgtest"
)

// Records delivered again after worker prune removed their load are not
// billed twice: the same ids and amounts are skipped as re-deliveries, a
// pruned id with another amount is refused with the file, line and reason
// and nothing of its file is loaded, and worker reprice of the contract is
// refused with a message saying why.
func TestRedeliveryAfterPruneIsNotBilledTwice(t *testing.T) {
	t.Parallel()
	c := cli{t, pgtest.NewURL(t)}
	db := pgtest.Open(t, c.dsn, dbconn.Options{})
	count := func(q string) int64 {
		t.Helper()
		var n int64
		if err := db.QueryRowContext(context.Background(), q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	records := writeFile(t, "records.csv", "contract_id,record_id,amount_minor\nacme,a1,6000\nacme,a2,6000\n")
	c.mustRun("load", "--tiers", writeFile(t, "tiers.csv", "contract_id,threshold_minor,discount_bp\nacme,0,0\nacme,10000,500\n"))
	c.mustRun("load", "--records", records)
	c.mustRun("run", "--until-done", "--heartbeat", "100ms", "--stale-after", "1s")
	billed := c.mustRun("export", "--out", "-", "--complete")
	if strings.Count(billed, "\nacme,") != 2 {
		t.Fatalf("export before pruning:\n%s", billed)
	}
	if out := c.mustRun("prune", "--load", "2"); !strings.HasPrefix(out, "pruned 1 load: 2 records") {
		t.Fatalf("prune:\n%s", out)
	}
	afterPrune := c.mustRun("export", "--out", "-")

	// The same two records again: skipped, nothing new to price or bill.
	if out := c.mustRun("load", "--records", records); !strings.Contains(out, "0 records accepted, 2 re-delivered (skipped)") {
		t.Fatalf("re-delivery after prune:\n%s", out)
	}
	c.mustRun("run", "--until-done", "--heartbeat", "100ms", "--stale-after", "1s")
	if got := c.mustRun("export", "--out", "-"); got != afterPrune {
		t.Fatalf("export after the re-delivery bills more:\n%s\nwas:\n%s", got, afterPrune)
	}
	if n := count(`SELECT available FROM baton.tasks WHERE kind = 'pricing' AND partition_key = 'acme'`); n != 2 {
		t.Fatalf("acme has %d records after the re-delivery, want 2", n)
	}

	// A pruned id with another amount, beside a new record: refused whole.
	changed := writeFile(t, "changed.csv", "contract_id,record_id,amount_minor\nacme,a3,100\nacme,a1,7000\n")
	loads := count(`SELECT count(*) FROM baton.loads`)
	_, errs, code := c.run("load", "--records", changed)
	want := changed + `:3: record_id "a1" of contract acme has amount_minor 7000, but load 2 (` + records +
		`) accepted it with amount_minor 6000 and it has been pruned since (worker prune); a pruned record cannot be amended (nothing was loaded)`
	if code != clienv.ExitBadInput || !strings.Contains(errs, want) {
		t.Fatalf("a pruned id with another amount: exit %d\n%s\nwant %s", code, errs, want)
	}
	if _, errs, code := c.run("load", "--records", changed, "--amend"); code != clienv.ExitBadInput || !strings.Contains(errs, "a pruned record cannot be amended") {
		t.Fatalf("--amend of a pruned record: exit %d\n%s", code, errs)
	}
	if n := count(`SELECT count(*) FROM baton.loads`); n != loads {
		t.Fatalf("refused loads left %d loads rows, had %d", n, loads)
	}
	if n := count(`SELECT available FROM baton.tasks WHERE kind = 'pricing' AND partition_key = 'acme'`); n != 2 {
		t.Fatalf("acme has %d records after refused loads, want 2", n)
	}

	// Re-pricing needs the records and their output, which are gone.
	if _, errs, code := c.run("reprice", "acme"); code == 0 || !strings.Contains(errs, "re-pricing contract acme: records were pruned by worker prune") {
		t.Fatalf("reprice of a pruned contract: exit %d\n%s", code, errs)
	}
}
