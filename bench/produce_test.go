package main

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// A produced record's line: the contract, a record id unique per load
// and line, and an amount in 1 … 100,000 minor units.
func TestAppendProducedWritesOneCSVLine(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	seen := map[string]bool{}
	var buf []byte
	for load := 1; load <= 3; load++ {
		for j := range 50 {
			buf = appendProduced(buf[:0], "C-00042", "p", load, j, rng)
			line, ok := strings.CutSuffix(string(buf), "\n")
			f := strings.Split(line, ",")
			if !ok || len(f) != 3 || f[0] != "C-00042" || f[1] != "p"+strconv.Itoa(load)+"-"+strconv.Itoa(j) {
				t.Fatalf("line %q: want C-00042,p%d-%d,<amount>", buf, load, j)
			}
			if a, err := strconv.ParseInt(f[2], 10, 64); err != nil || a < 1 || a > 100_000 {
				t.Fatalf("line %q: amount %q outside 1 … 100000 (%v)", buf, f[2], err)
			}
			if seen[f[1]] {
				t.Fatalf("record id %s produced twice", f[1])
			}
			seen[f[1]] = true
		}
	}
}
