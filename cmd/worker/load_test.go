package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

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
		if code != exitBadInput || !strings.Contains(errs, bad+":2: tier set of contract c1 is rejected because 2 of its lines are invalid: 3, 4") {
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

// The progress of a load is drawn only on a terminal, and not among JSON
// logs; scripts and pipes get the summary alone.
func TestLoadProgressShown(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		terminal bool
		format   string
		want     bool
	}{
		{true, "text", true},
		{true, "TEXT", true},
		{true, "json", false},
		{false, "text", false},
		{false, "json", false},
	} {
		if got := showProgress(c.terminal, c.format); got != c.want {
			t.Errorf("showProgress(terminal %v, --log-format %s) = %v, want %v", c.terminal, c.format, got, c.want)
		}
	}
	var b strings.Builder
	p := newLoadProgress(&b, "loading", "text") // not a terminal
	p.update("records", 100)
	p.reading(100, 10, 100)
	p.done()
	if b.Len() != 0 {
		t.Fatalf("progress written to a pipe: %q", b.String())
	}
}

// A records file's progress line: rows read, the share of the file read
// when its size is known, and once a second has passed the rate and the
// time left at that rate.
func TestReadingLine(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		rows, read, size int64
		elapsed          time.Duration
		want             string
	}{
		{0, 0, 1000, 0, "loading: reading records: 0 rows (0%)"},
		{950, 4096, 1 << 20, 500 * time.Millisecond, "loading: reading records: 950 rows (0%)"},
		{3_200_000, 45, 100, 4 * time.Second, "loading: reading records: 3,200,000 rows (45%), 800,000 rows/s, 5s left"},
		{12_345_678, 60 << 20, 0, 10 * time.Second, "loading: reading records: 12,345,678 rows, 1,234,567 rows/s"},
		{1000, 100, 100, 2 * time.Second, "loading: reading records: 1,000 rows (100%), 500 rows/s"},
	} {
		if got := readingLine("loading", c.rows, c.read, c.size, c.elapsed); got != c.want {
			t.Errorf("readingLine(%d rows, %d of %d bytes, %s) = %q, want %q", c.rows, c.read, c.size, c.elapsed, got, c.want)
		}
	}
}
