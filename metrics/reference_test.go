package metrics

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/horizon"
	"github.com/batonhq/baton/internal/pgtest"
)

var updateReference = flag.Bool("update-reference", false, "rewrite docs/metrics.md from the registry")

const referencePath = "../docs/metrics.md"

// docs/metrics.md is generated from the registry a worker serves, so it
// cannot drift from it: this test fails when it differs, and go test
// ./metrics -run TestMetricsReference -update-reference rewrites it.
func TestMetricsReferenceIsCurrent(t *testing.T) {
	m := New()
	// Every metric a worker can serve: the held gauge, the horizon's, the
	// handle's, the scheduled jobs' and verification's.
	m.held = func() map[string]int { return map[string]int{"active": 0} }
	m.WatchHorizon(func(context.Context) (horizon.Report, error) {
		return horizon.Report{Tables: []horizon.Table{{Name: "tasks"}}}, nil
	})
	m.WatchDB(pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{MaxOpenConns: 1}))
	m.OnJobRun("job", "ok", 0)
	m.SetVerifyMismatches(0)
	watchSampledBacklog(t, m)
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(families, func(i, j int) bool { return families[i].GetName() < families[j].GetName() })
	var b strings.Builder
	b.WriteString("# Metrics\n\n")
	b.WriteString("Every metric a worker serves at `/metrics` with `--metrics-addr` (besides the Go runtime's and the\n")
	b.WriteString("process's). Generated from the registry (`go test ./metrics -run TestMetricsReference -update-reference`);\n")
	b.WriteString("a test fails when it differs from it. How to use them: [operations.md](operations.md#metrics).\n\n")
	b.WriteString("| metric | type | labels | meaning |\n|---|---|---|---|\n")
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "baton_") {
			continue
		}
		labels := map[string]bool{}
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = true
			}
		}
		names := make([]string, 0, len(labels))
		for l := range labels {
			names = append(names, "`"+l+"`")
		}
		sort.Strings(names)
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", f.GetName(), typeName(f.GetType()), strings.Join(names, ", "),
			strings.ReplaceAll(f.GetHelp(), "|", "\\|"))
	}
	got := b.String()
	if *updateReference {
		if err := os.WriteFile(referencePath, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatalf("reading %s: %v (the -update-reference flag writes it)", referencePath, err)
	}
	if string(want) != got {
		t.Errorf("%s differs from the registry: run go test ./metrics -run TestMetricsReference -update-reference and review the difference", referencePath)
	}
}

func typeName(t dto.MetricType) string {
	return strings.ToLower(t.String())
}
