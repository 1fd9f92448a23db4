package main

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestClassifyNormalisedStatements(t *testing.T) {
	// As pg_stat_statements stores them: constants replaced by $n.
	cases := map[string]string{
		`WITH w AS ( INSERT INTO baton.workers (instance_id, name) VALUES ($1, $2) ON CONFLICT (instance_id) DO UPDATE SET heartbeat_at = now(), expires_at = EXCLUDED.expires_at ) UPDATE baton.tasks t SET heartbeat_at = now()`:                                         "heartbeat",
		`WITH c AS ( SELECT t.partition_key FROM baton.tasks t FOR UPDATE OF t SKIP LOCKED ), wh AS ( INSERT INTO baton.workers (instance_id, name, kind, expires_at) SELECT $1, $2, $3, now() ON CONFLICT (instance_id) DO NOTHING ) UPDATE baton.tasks t SET owner = $4`: "claim (CAS)",
		`SELECT partition_key, version, owner IS NOT NULL FROM baton.tasks WHERE available > position LIMIT $1`:                                                                                                                                                            "claim scan (Candidates)",
		`WITH c AS ( SELECT t.partition_key FROM baton.tasks t FOR UPDATE OF t SKIP LOCKED ) UPDATE baton.tasks t SET version = t.version + $3, owner = $4`:                                                                                                                "claim (CAS)",
		`WITH l AS ( SELECT 1 FOR UPDATE OF t ) UPDATE baton.tasks t SET version = t.version + $4, owner = $5 RETURNING t.partition_key, t.available > t.position`:                                                                                                         "release",
		`SELECT position, available, checkpoint FROM baton.tasks WHERE partition_key = $1 FOR KEY SHARE`:                                                                                                                                                                   "fence",
		`UPDATE baton.tasks SET position = $1, checkpoint = $2::jsonb WHERE partition_key = $3`:                                                                                                                                                                            "advance checkpoint",
		`INSERT INTO baton.priced (contract_id, seq) SELECT $1, s FROM unnest($2::bigint[])`:                                                                                                                                                                               "write priced",
		`SELECT seq, record_id, amount_minor FROM baton.records WHERE contract_id = $1 AND seq > $2`:                                                                                                                                                                       "read records",
		`SELECT first_seq, record_ids, amounts FROM baton.record_chunks WHERE contract_id = $1 AND first_seq >= coalesce(( SELECT max(first_seq) FROM baton.record_chunks WHERE contract_id = $1 AND first_seq <= $2 + $3), $4) AND first_seq <= $2 + $5`:                  "read records",
		`copy "baton"."priced" ( "contract_id", "seq", "record_id" ) from stdin binary;`:                                                                                                                                                                                   "write priced",
		`commit`:                          "commit",
		`SELECT pg_try_advisory_lock($1)`: "advisory lock",
	}
	for q, want := range cases {
		if got := classify(q); got != want {
			t.Errorf("classify(%.60q) = %q, want %q", q, got, want)
		}
	}
}

func TestParseBench(t *testing.T) {
	out := "pkg: github.com/batonhq/baton/bench\nBenchmarkHeartbeat/leases=10-2   \t     100\t    303028 ns/op\t     33000 leases/s\t 6450 B/op\nPASS\n"
	lines := parseBench(out)
	if len(lines) != 1 {
		t.Fatalf("parsed %d lines", len(lines))
	}
	l := lines[0]
	if l.Name != "BenchmarkHeartbeat/leases=10-2" || l.N != 100 || l.Metrics["ns/op"] != 303028 || l.Metrics["leases/s"] != 33000 || l.Package != "github.com/batonhq/baton/bench" {
		t.Fatalf("parsed %+v", l)
	}
}

func TestSummarize(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	d := summarize(ds)
	if d.N != 100 || d.Min != 1 || d.P50 != 50 || d.P99 != 99 || d.Max != 100 || d.Mean != 50.5 {
		t.Fatalf("summary %+v", d)
	}
	if summarize(nil).N != 0 {
		t.Fatal("empty sample")
	}
}

func TestReadStatOfSelf(t *testing.T) {
	st, err := readStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st.ppid != os.Getppid() {
		t.Fatalf("ppid %d, want %d", st.ppid, os.Getppid())
	}
}

func TestAggregatePerf(t *testing.T) {
	script := "        postgres 10 561237128d46 heap_fill_tuple (/usr/lib/postgresql/15/bin/postgres)\n" +
		"        postgres 10 ffffffff8225f2d9 pvm_irq_enable ([kernel.kallsyms])\n" +
		"          worker 20 447527 runtime.mallocgc (/tmp/x/worker)\n" +
		"        postgres 99 447527 [unknown] (/usr/lib/postgresql/15/bin/postgres)\n"
	out := aggregatePerf(script, map[string]map[int]bool{"server": {10: true}, "workers": {20: true}})
	if len(out) != 3 {
		t.Fatalf("%d sections", len(out))
	}
	for _, want := range []string{"50.0%  server", "25.0%  workers", "25.0%  " + otherProcs} {
		if !contains(out[0].Text, want) {
			t.Errorf("split %q lacks %q", out[0].Text, want)
		}
	}
	if !contains(out[1].Text, "50.0% in the kernel") || !contains(out[1].Text, "[k] pvm_irq_enable") {
		t.Errorf("server section %q", out[1].Text)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
