package faults

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// stats are one scenario run's figures, gathered into the suite summary.
type stats struct {
	scenario      string
	faults        map[string]int
	records       int64
	discrepancies int
	takeoversMu   sync.Mutex
	takeoverTimes []time.Duration
}

func newStats(name string) *stats { return &stats{scenario: name, faults: map[string]int{}} }

func (s *stats) fault(kind string) { s.faults[kind]++ }

func (s *stats) takeover(d time.Duration) {
	s.takeoversMu.Lock()
	defer s.takeoversMu.Unlock()
	s.takeoverTimes = append(s.takeoverTimes, d)
}

var (
	allMu sync.Mutex
	all   []*stats
)

func record(s *stats) {
	allMu.Lock()
	defer allMu.Unlock()
	all = append(all, s)
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p*float64(len(s))+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

// printSummary writes the suite's figures to stderr (shown by go test -v
// and in CI logs).
func printSummary() {
	allMu.Lock()
	defer allMu.Unlock()
	if len(all) == 0 {
		return
	}
	var b strings.Builder
	runs := map[string]int{}
	faults := map[string]int{}
	var records int64
	var disc int
	var takeovers []time.Duration
	for _, s := range all {
		name := s.scenario
		if i := strings.Index(name, "/"); i >= 0 {
			name = name[:i]
		}
		runs[name]++
		for k, v := range s.faults {
			faults[k] += v
		}
		records += s.records
		disc += s.discrepancies
		takeovers = append(takeovers, s.takeoverTimes...)
	}
	fmt.Fprintf(&b, "\nfault-injection summary\n")
	names := make([]string, 0, len(runs))
	for n := range runs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "  %-34s %d schedule(s)\n", n, runs[n])
	}
	kinds := make([]string, 0, len(faults))
	for k := range faults {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	fmt.Fprintf(&b, "  faults injected:")
	for _, k := range kinds {
		fmt.Fprintf(&b, " %s=%d", k, faults[k])
	}
	fmt.Fprintf(&b, "\n  records checked: %d; discrepancies: %d\n", records, disc)
	if len(takeovers) > 0 {
		fmt.Fprintf(&b, "  takeover (fault → first batch by another worker, %d contracts): p50 %s, p99 %s, max %s (bound 1s + 3×200ms + poll 200ms + a batch)\n",
			len(takeovers), percentile(takeovers, 0.5).Round(time.Millisecond),
			percentile(takeovers, 0.99).Round(time.Millisecond), percentile(takeovers, 1).Round(time.Millisecond))
	}
	fmt.Fprint(os.Stderr, b.String())
}
