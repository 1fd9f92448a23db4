package main

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/pricing/pricer"
)

// The figures the README gives for pruning 1M records: seeds 1,000
// contracts of 1,000 records, prices them, and prunes the load with the
// default batch size and a smaller one (on a copy of the data each time).
// It measures and asserts nothing about time; it runs only with
// BATON_MEASURE_PRUNE=1 (it takes minutes).
func TestPruneMeasure1M(t *testing.T) {
	if os.Getenv("BATON_MEASURE_PRUNE") != "1" {
		t.Skip("set BATON_MEASURE_PRUNE=1 to measure pruning 1M records")
	}
	for _, batch := range []string{"10000", "1000"} {
		c := cli{t, pgtest.NewURL(t)}
		start := time.Now()
		c.mustRun("seed", "--contracts", "1000", "--records-per-contract", "1000", "--dir", t.TempDir(), "--load")
		t.Logf("seeded and loaded 1M records in %s", time.Since(start).Round(time.Millisecond))
		start = time.Now()
		c.mustRun("run", "--until-done", "--heartbeat", "200ms", "--stale-after", "2s")
		t.Logf("priced them in %s", time.Since(start).Round(time.Millisecond))
		db := pgtest.Open(t, c.dsn, dbconn.Options{})
		size := func(q string) float64 {
			t.Helper()
			var n float64
			if err := db.QueryRow(q).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		stored := size(`SELECT pg_total_relation_size('baton.record_chunks') + pg_total_relation_size('baton.priced')`)
		start = time.Now()
		out := c.mustRun("prune", "--load", "1", "--batch-size", batch, "--json")
		var res pricer.PruneReport
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatal(err)
		}
		t.Logf("batch %s: pruned %d records in %d ms (command %s): %d transactions, the longest %d ms",
			batch, res.Records, res.ElapsedMS, time.Since(start).Round(time.Millisecond), res.Transactions, res.LongestTransactionMS)
		t.Logf("the record ids and amounts kept take %.1f bytes a pruned record (pruned_chunks); its chunks and priced rows took %.1f",
			size(`SELECT pg_total_relation_size('baton.pruned_chunks')`)/float64(res.Records), stored/float64(res.Records))
	}
}
