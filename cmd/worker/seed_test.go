package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// seed --shape spreads the records as asked and says so; without it the
// message keeps its uniform form.
func TestSeedShape(t *testing.T) {
	t.Parallel()
	c := cli{t, "postgres://baton@127.0.0.1:1/nowhere?connect_timeout=1"} // no database needed
	for _, tc := range []struct {
		shape  string
		says   string
		counts map[string]int // records by contract
	}{
		{"hot:0.5", "(4 contracts, 40 records shaped hot:0.5, seed 1)", map[string]int{"c-000000": 20, "c-000001": 7, "c-000002": 7, "c-000003": 6}},
		{"zipf:1", "(4 contracts, 40 records shaped zipf:1, seed 1)", map[string]int{"c-000000": 19, "c-000001": 10, "c-000002": 6, "c-000003": 5}},
		{"uniform", "(4 contracts × 10 records, seed 1)", map[string]int{"c-000000": 10, "c-000001": 10, "c-000002": 10, "c-000003": 10}},
	} {
		dir := t.TempDir()
		out := c.mustRun("seed", "--contracts", "4", "--records-per-contract", "10", "--shape", tc.shape, "--dir", dir)
		if !strings.Contains(out, tc.says) {
			t.Fatalf("seed --shape %s said %q, want %q in it", tc.shape, out, tc.says)
		}
		b, err := os.ReadFile(filepath.Join(dir, "records.csv"))
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n")[1:] {
			got[strings.Split(line, ",")[0]]++
		}
		for k, n := range tc.counts {
			if got[k] != n || len(got) != len(tc.counts) {
				t.Fatalf("seed --shape %s: records by contract %v, want %v", tc.shape, got, tc.counts)
			}
		}
	}
}
