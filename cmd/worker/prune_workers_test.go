package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/clienv"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/report"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/pricing/pricer"
)

// worker prune removes a priced load while worker processes price another
// one: they go on pricing throughout, nothing unpriced is removed (a load
// being priced is refused whole), and afterwards verify, export --complete
// and status agree with what is left.
func TestPruneWhileWorkersPrice(t *testing.T) {
	t.Parallel()
	c := cli{t, pgtest.NewURL(t)}
	db := pgtest.OpenDB(t, c.dsn, dbconn.Options{})
	ctx := context.Background()
	count := func(q string, args ...any) int64 {
		t.Helper()
		var n int64
		if err := db.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	c.mustRun("seed", "--contracts", "10", "--records-per-contract", "2000", "--prefix", "old", "--dir", t.TempDir(), "--load")
	c.mustRun("run", "--until-done", "--heartbeat", "100ms", "--stale-after", "1s")
	c.mustRun("seed", "--contracts", "10", "--records-per-contract", "6000", "--prefix", "new", "--dir", t.TempDir(), "--load")
	const oldLoad, newLoad = 1, 2

	var workers []*exec.Cmd
	var logs []*bytes.Buffer
	for i := range 2 {
		w := c.command("run", "--until-done", "--id", fmt.Sprintf("w%d", i), "--heartbeat", "100ms", "--stale-after", "1s",
			"--batch-size", "25", "--claim-group", "1", "--max-partitions", "3")
		var buf bytes.Buffer
		w.Stdout, w.Stderr = &buf, &buf
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		workers, logs = append(workers, w), append(logs, &buf)
	}
	t.Cleanup(func() {
		for _, w := range workers {
			_ = w.Process.Kill()
		}
	})
	testutil.Eventually(t, 60*time.Second, "workers pricing the new load", func() error {
		if n := count(`SELECT count(*) FROM baton.priced WHERE contract_id LIKE 'new%'`); n == 0 {
			return fmt.Errorf("nothing priced yet")
		}
		return nil
	})

	// The load being priced is refused whole: nothing of it goes.
	before := count(`SELECT count(*) FROM baton.record_chunks WHERE load_id = ?`, newLoad)
	out, _, code := c.run("prune", "--load", fmt.Sprint(newLoad))
	if code != clienv.ExitIncomplete || !strings.Contains(out, fmt.Sprintf("load %d: skipped: ", newLoad)) || !strings.Contains(out, "not priced yet") {
		t.Fatalf("prune of the load being priced: exit %d\n%s", code, out)
	}
	if n := count(`SELECT count(*) FROM baton.record_chunks WHERE load_id = ?`, newLoad); n != before {
		t.Fatalf("refused prune removed chunks: %d left of %d", n, before)
	}

	// The priced load goes, in many small transactions, while the
	// workers price: they commit batches between its start and its end.
	var from, to time.Time
	if err := db.QueryRowContext(ctx, `SELECT clock_timestamp()`).Scan(&from); err != nil {
		t.Fatal(err)
	}
	js := c.mustRun("prune", "--load", fmt.Sprint(oldLoad), "--batch-size", "500", "--json")
	if err := db.QueryRowContext(ctx, `SELECT clock_timestamp()`).Scan(&to); err != nil {
		t.Fatal(err)
	}
	var res pricer.PruneReport
	if err := json.Unmarshal([]byte(js), &res); err != nil {
		t.Fatalf("%v\n%s", err, js)
	}
	if len(res.Loads) != 1 || res.Loads[0].Outcome != pricer.PruneDone || res.Records != 20000 || res.Transactions < 20 {
		t.Fatalf("prune --json: %s", js)
	}
	if n := count(`SELECT count(*) FROM baton.priced WHERE contract_id LIKE 'new%' AND priced_at BETWEEN ? AND ?`, from, to); n == 0 {
		t.Fatalf("no batch of the new load committed while the prune ran (%s to %s)", from, to)
	}
	if n := count(`SELECT count(*) FROM baton.records WHERE contract_id LIKE 'old%'`) + count(`SELECT count(*) FROM baton.priced WHERE contract_id LIKE 'old%'`); n != 0 {
		t.Fatalf("%d records or priced rows of the pruned load left", n)
	}

	for i, w := range workers {
		if err := w.Wait(); err != nil {
			t.Fatalf("worker %d: %v\n%s", i, err, logs[i])
		}
	}
	sum, err := pricer.NewStore(db, "").Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Mismatches) > 0 || sum.Records != 80000 || sum.Priced != 80000 {
		t.Fatalf("verify after pruning: %+v", sum)
	}
	if n := count(`SELECT count(*) FROM baton.priced`); n != 60000 {
		t.Fatalf("%d priced rows, want the new load's 60000", n)
	}
	exp := c.mustRun("export", "--out", "-", "--complete")
	if lines := strings.Count(exp, "\n"); lines != 60001 {
		t.Fatalf("export --complete: %d lines, want a header and 60000 rows", lines)
	}
	var st report.Status
	if err := json.Unmarshal([]byte(c.mustRun("status", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Totals.ByState["done"] != 20 || st.Totals.Processed != 80000 || st.Totals.Pending != 0 {
		t.Fatalf("status after pruning: %+v", st.Totals)
	}

	// Now priced, the new load goes too; a dry run first removes nothing.
	out = c.mustRun("prune", "--older-than", "1ms", "--dry-run")
	if !strings.Contains(out, "would prune 1 load: 60000 records and their priced rows, of 10 contracts (dry run: nothing removed)") {
		t.Fatalf("prune --dry-run:\n%s", out)
	}
	out = c.mustRun("prune", "--load", fmt.Sprint(newLoad), fmt.Sprint(oldLoad))
	if !strings.Contains(out, fmt.Sprintf("load %d: already pruned", oldLoad)) || !strings.Contains(out, "pruned 1 load: 60000 records and their priced rows, of 10 contracts, in ") {
		t.Fatalf("prune:\n%s", out)
	}
	if _, errs, code := c.run("prune", "--load", "7"); code != clienv.ExitNotFound || !strings.Contains(errs, "no such load: 7") {
		t.Fatalf("prune of a missing load: exit %d\n%s", code, errs)
	}
	if _, errs, code := c.run("prune"); code != clienv.ExitUsage || !strings.Contains(errs, "--load N") {
		t.Fatalf("prune without a selection: exit %d\n%s", code, errs)
	}
	if n := count(`SELECT count(*) FROM baton.loads WHERE pruned_at IS NOT NULL`); n != 2 {
		t.Fatalf("%d loads marked pruned, want 2", n)
	}
}
