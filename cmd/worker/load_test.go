package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/batonhq/baton/internal/clienv"
	"github.com/batonhq/baton/internal/pgtest"
)

// A load's summary: failed loads take no load id, so the first load that
// succeeds is load 1; counts take the noun's number; a load too small or
// short for a meaningful rate shows none. Every invalid line of a rejected
// tier set is named.
func TestLoadSummaryAndIDs(t *testing.T) {
	t.Parallel()
	c := cli{t, pgtest.NewURL(t)}
	bad := writeFile(t, "tiers.csv", "contract_id,threshold_minor,discount_bp\nc1,0,0\nc1,10,x\nc1,20,y\n")
	for range 2 {
		_, errs, code := c.run("load", "--tiers", bad)
		if code != clienv.ExitBadInput || !strings.Contains(errs, bad+":2: tier set of contract c1 is rejected because 2 of its lines are invalid: 3, 4") {
			t.Fatalf("invalid tiers: exit %d\n%s", code, errs)
		}
	}
	var records strings.Builder
	records.WriteString("contract_id,record_id,amount_minor\n")
	for i := range 17 {
		fmt.Fprintf(&records, "c1,r%d,100\n", i)
	}
	out := c.mustRun("load", "--tiers", writeFile(t, "good.csv", "contract_id,threshold_minor,discount_bp\nc1,0,0\n"),
		"--records", writeFile(t, "records.csv", records.String()))
	if !strings.HasPrefix(out, "load 1: 1 tier row, 1 contract created, 17 records accepted, 0 re-delivered (skipped), 0 rejected in ") ||
		strings.Contains(out, "records/s") {
		t.Fatalf("summary of the first load to succeed, after two that failed:\n%s", out)
	}
	out = c.mustRun("load", "--records", writeFile(t, "one.csv", "contract_id,record_id,amount_minor\nc1,r-last,5\n"))
	if !strings.HasPrefix(out, "load 2: 0 tier rows, 0 contracts created, 1 record accepted,") {
		t.Fatalf("summary of the second load:\n%s", out)
	}
}
