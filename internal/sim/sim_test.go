package sim

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/testutil"
)

var long = flag.Bool("long", false, "soak mode: run 100 times more simulated schedules, or until BATON_SIM_DURATION")

// Default number of schedules: about 5–10 s on a 2-core machine.
const defaultSchedules = 1200

func TestMain(m *testing.M) {
	// Schedules allocate fast but keep little: collect less often.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	// The split's conformance cases run on PostgreSQL too.
	os.Exit(pgtest.Run(m))
}

func soak() bool { return *long || os.Getenv("BATON_SIM_LONG") == "1" }

// baseSeed is the run's base seed (testutil.Seed: BATON_SEED, or a new
// one); schedule i runs seed base+i.
func baseSeed(t *testing.T) int64 { return testutil.Seed(t) }

type summary struct {
	schedules, events, workers int
	virtual                    time.Duration
	faults                     [NumFaultKinds]int
	items, checked             int64
	commits, claims, takeovers int
	fenced, lost, failures     int
	stale, late, resolved      int
	splits, segments, segClaim int
	splitting                  int // schedules with a Splitter processor
	splitConflicts             int
	drained, truncated         int
	violations                 int
	causes                     map[string]int
	first                      *Violation
	firstCfg                   Config
	latency                    map[string][]time.Duration // by timing profile
	clean                      map[string][]time.Duration
	bound                      map[string]time.Duration
	ratio, ratioClean          []float64 // latency / (bound + one batch), all profiles
}

func (s *summary) add(cfg Config, r Result) {
	s.schedules++
	s.events += r.Events
	s.workers += r.Workers
	s.virtual += r.Virtual
	for k := range s.faults {
		s.faults[k] += r.Faults[k]
	}
	s.items += r.Items
	s.checked += r.ItemsChecked
	s.commits += r.Commits
	s.claims += r.Claims
	s.takeovers += r.Takeover
	s.fenced += r.Fenced
	s.lost += r.Lost
	s.failures += r.Failures
	s.stale += r.StaleStatements
	s.late += r.LateWrites
	s.resolved += r.ResolvedCommits
	s.splits += r.Splits
	s.segments += r.Segments
	s.segClaim += r.SegmentClaims
	s.splitConflicts += r.SplitKeyConflicts
	if cfg.SegmentRecords > 0 {
		s.splitting++
	}
	if r.Drained {
		s.drained++
	}
	if r.Truncated {
		s.truncated++
	}
	if r.Violation != nil {
		s.violations++
		if s.first == nil || r.Seed < s.first.Seed {
			s.first, s.firstCfg = r.Violation, cfg
		}
	}
	if s.latency == nil {
		s.latency, s.clean, s.bound = map[string][]time.Duration{}, map[string][]time.Duration{}, map[string]time.Duration{}
		s.causes = map[string]int{}
	}
	for c, n := range r.FailureCauses {
		s.causes[c] += n
	}
	c := cfg
	c.setDefaults()
	for _, l := range r.TakeoverLatencies {
		s.ratio = append(s.ratio, float64(l)/float64(r.TakeoverBound+c.WorkTime))
	}
	for _, l := range r.CleanTakeoverLatencies {
		s.ratioClean = append(s.ratioClean, float64(l)/float64(r.TakeoverBound+c.WorkTime))
	}
	// Absolute latencies for the two standard profiles.
	var prof string
	switch {
	case c.Heartbeat == 200*time.Millisecond && c.StaleAfter == time.Second && c.Confirm == 3 && c.PollInterval == c.Heartbeat:
		prof = "heartbeat 200ms, stale 1s, confirm 3"
	case c.Heartbeat == time.Second && c.StaleAfter == 10*time.Second && c.Confirm == 3 && c.PollInterval == c.Heartbeat:
		prof = "heartbeat 1s, stale 10s, confirm 3"
	default:
		return
	}
	s.latency[prof] = append(s.latency[prof], r.TakeoverLatencies...)
	s.clean[prof] = append(s.clean[prof], r.CleanTakeoverLatencies...)
	s.bound[prof] = r.TakeoverBound
}

// runSchedules runs schedules base, base+1, … on every CPU, n of them or
// until deadline, stopping early after a violation.
func runSchedules(n int, deadline time.Time, base int64, mk func(int64) Config) summary {
	return runEach(n, deadline, base, mk, nil)
}

// runEach is runSchedules calling each (serialised) with every result.
func runEach(n int, deadline time.Time, base int64, mk func(int64) Config, each func(Config, Result)) summary {
	var next atomic.Int64
	var stop atomic.Bool
	var mu sync.Mutex
	var sum summary
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				i := next.Add(1) - 1
				if (n > 0 && i >= int64(n)) || (!deadline.IsZero() && time.Now().After(deadline)) {
					return
				}
				cfg := mk(base + i)
				r := Run(cfg)
				mu.Lock()
				sum.add(cfg, r)
				if each != nil {
					each(cfg, r)
				}
				mu.Unlock()
				if r.Violation != nil || r.Truncated {
					stop.Store(true)
				}
			}
		}()
	}
	wg.Wait()
	return sum
}

func logSummary(t *testing.T, s summary) {
	t.Helper()
	var faults []string
	for k, n := range s.faults {
		faults = append(faults, fmt.Sprintf("%s %d", FaultKind(k), n))
	}
	t.Logf("schedules: %d (%d drained), events: %d, virtual time: %s, worker instances: %d",
		s.schedules, s.drained, s.events, s.virtual.Round(time.Second), s.workers)
	t.Logf("faults injected: %s", strings.Join(faults, ", "))
	t.Logf("items committed: %d, items checked exactly once at the end: %d, commits: %d, claims: %d, takeovers: %d",
		s.items, s.checked, s.commits, s.claims, s.takeovers)
	t.Logf("schedules with a splitter: %d, splits: %d, segments: %d, claims of segments: %d, splits that met another's segment key: %d",
		s.splitting, s.splits, s.segments, s.segClaim, s.splitConflicts)
	t.Logf("batches fenced: %d, leases lost: %d, failures recorded: %d, stale statements refused: %d, late writes after resume: %d, unknown commit outcomes resolved as applied: %d",
		s.fenced, s.lost, s.failures, s.stale, s.late, s.resolved)
	profs := make([]string, 0, len(s.latency))
	for p := range s.latency {
		profs = append(profs, p)
	}
	slices.Sort(profs)
	pct := func(ls []time.Duration) string {
		if len(ls) == 0 {
			return "n=0"
		}
		return fmt.Sprintf("n=%d p50=%s p99=%s max=%s", len(ls), Percentile(ls, 50).Round(time.Millisecond),
			Percentile(ls, 99).Round(time.Millisecond), Percentile(ls, 100).Round(time.Millisecond))
	}
	for _, p := range profs {
		t.Logf("takeover latency (%s): bound stale+poll+confirm×heartbeat = %s, + one batch; single fault: %s; all: %s",
			p, s.bound[p], pct(s.clean[p]), pct(s.latency[p]))
	}
	ratios := func(rs []float64) string {
		if len(rs) == 0 {
			return "n=0"
		}
		slices.Sort(rs)
		over := len(rs) - sortSearch(rs, 1)
		q := func(p float64) float64 { return rs[min(len(rs)-1, int(p/100*float64(len(rs))))] }
		return fmt.Sprintf("n=%d p50=%.2f p99=%.2f max=%.2f, above 1: %.1f%%", len(rs), q(50), q(99), rs[len(rs)-1], 100*float64(over)/float64(len(rs)))
	}
	t.Logf("takeover latency / (bound + one batch), all timing profiles: single fault: %s; all: %s", ratios(s.ratioClean), ratios(s.ratio))
	causes := make([]string, 0, len(s.causes))
	for c, n := range s.causes {
		causes = append(causes, fmt.Sprintf("%s %d", c, n))
	}
	slices.Sort(causes)
	t.Logf("batch failures recorded, by cause: %s", strings.Join(causes, ", "))
	t.Logf("violations: %d, truncated schedules: %d", s.violations, s.truncated)
}

func sortSearch(xs []float64, v float64) int {
	i, _ := slices.BinarySearch(xs, v)
	for i < len(xs) && xs[i] <= v {
		i++
	}
	return i
}

// reportViolation replays the failing schedule with tracing and logs the
// steps that concern its partition.
func reportViolation(t *testing.T, v *Violation, cfg Config) {
	t.Helper()
	cfg.Trace = true
	r := Run(cfg)
	var lines []string
	key := fmt.Sprintf("p%d", v.Partition)
	for _, l := range r.Trace {
		switch {
		case v.Partition < 0, strings.Contains(l, key+"@"), strings.Contains(l, key+" "):
		case strings.Contains(l, "store: restart"), strings.Contains(l, "stall"), strings.Contains(l, "VIOLATION"):
		case strings.Contains(l, "connections reset"), strings.Contains(l, "crashed"), strings.Contains(l, "paused"),
			strings.Contains(l, "suspended"), strings.Contains(l, "resumed"), strings.Contains(l, "network"):
		default:
			continue
		}
		lines = append(lines, l)
	}
	if len(lines) > 80 {
		lines = lines[len(lines)-80:]
	}
	t.Logf("schedule: %s", cfg)
	t.Logf("trace (last steps concerning partition %d):\n%s", v.Partition, strings.Join(lines, "\n"))
}

// defaultMix is a random schedule of the protocol as implemented: the
// checkpoint update is a compare-and-set on the fenced position.
func defaultMix(seed int64) Config {
	c := RandomConfig(seed)
	c.AdvanceCAS = true
	return c
}

// TestSimulatedSchedules runs many random schedules of the protocol model
// (workers, partitions, timings, clock drift and fault mix all derived
// from each schedule's seed) and checks every invariant at every step.
func TestSimulatedSchedules(t *testing.T) {
	base := baseSeed(t)
	n := defaultSchedules
	var deadline time.Time
	if soak() {
		n *= 100
		if v := os.Getenv("BATON_SIM_DURATION"); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				t.Fatalf("BATON_SIM_DURATION=%q: %v", v, err)
			}
			n, deadline = 0, time.Now().Add(d)
		}
	}
	replay := fmt.Sprintf(testutil.SeedEnv+"=%d", base)
	t.Logf("base seed %d (schedule i uses seed %d+i); replay with %s", base, base, replay)
	start := time.Now()
	s := runSchedules(n, deadline, base, defaultMix)
	t.Logf("wall time: %s", time.Since(start).Round(time.Millisecond))
	logSummary(t, s)
	if s.first != nil {
		reportViolation(t, s.first, s.firstCfg)
		rp := fmt.Sprintf(testutil.SeedEnv+"=%d", s.first.Seed)
		t.Fatalf("%v\nreplay with %s go test ./internal/sim -run TestSimulatedSchedules", s.first, rp)
	}
	if s.truncated > 0 {
		t.Fatalf("%d schedule(s) hit MaxEvents; replay with "+testutil.SeedEnv+"=%d", s.truncated, base)
	}
}

// findViolation runs up to n schedules of mk and returns the first
// violation found (by lowest seed) and how many schedules it took.
func findViolation(n int, base int64, mk func(int64) Config) (*Violation, int) {
	s := runSchedules(n, time.Time{}, base, mk)
	return s.first, s.schedules
}

// TestMutationsAreCaught breaks one part of the protocol at a time and
// checks that the checker finds a violation: a checker that cannot fail
// proves nothing.
func TestMutationsAreCaught(t *testing.T) {
	base := baseSeed(t)
	t.Logf("base seed %d; replay with "+testutil.SeedEnv+"=%d", base, base)
	cases := []struct {
		name       string
		mut        Mutation
		schedules  int
		invariants []string
		mix        func(c *Config)
	}{{
		// Without the fence, a worker whose clock stood still while it
		// was suspended resumes believing its lease is valid, and its
		// next batch commits although the partition was taken over.
		name: "fence off", mut: MutNoFence, schedules: 300,
		invariants: []string{"single writer", "exactly-once", "checkpoint exact", "checkpoint monotone"},
		mix: func(c *Config) {
			c.Faults = Faults{Suspend: 1, Pause: 0.3, Work: 3}
			c.Mode = ModeLock
		},
	}, {
		// A blind claim lets two workers take the same version, or takes
		// a live lease from under its owner; a blind claim made with its
		// first batch commits that batch over a row another worker has
		// since claimed.
		name: "claim without compare-and-set", mut: MutClaimNoCAS, schedules: 100,
		invariants: []string{"versions increase", "local deadline", "single writer"},
		mix:        func(c *Config) { c.Faults = Faults{Crash: 0.1, Work: 3} },
	}, {
		// With no safety margin, a slow clock keeps a cut-off owner
		// believing in a lease the database has already given away.
		name: "no safety margin under clock drift", mut: MutNoSafetyMargin, schedules: 300,
		invariants: []string{"local deadline"},
		mix: func(c *Config) {
			c.Drift = 0.05
			c.Faults = Faults{Partition: 1, Work: 3}
		},
	}, {
		// Without the idle-in-transaction timeout, the open transaction
		// of a worker that died without closing its connection holds the
		// fence lock for ever: claims skip the row and its work never
		// completes.
		name: "no idle-in-transaction timeout", mut: MutNoIdleTimeout, schedules: 300,
		invariants: []string{"liveness"},
		mix:        func(c *Config) { c.Faults = Faults{Crash: 0.5, Work: 3} },
	}, {
		// Work added to a segment runs it on into items that the next
		// segment, or its partition, processes too: the same item of the
		// partition is committed twice, by two rows.
		name: "work added to segments", mut: MutSegmentWork, schedules: 100,
		invariants: []string{"exactly-once"},
		mix: func(c *Config) {
			c.Faults = Faults{Work: 3}
			c.SegmentRecords = int64(1 + c.BatchSize/2)
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mk := func(seed int64) Config {
				c := RandomConfig(seed)
				c.Mutation = tc.mut
				c.AdvanceCAS = true // as implemented
				c.Workers = 2 + int(uint64(seed)%4)
				c.Partitions = 1 + int(uint64(seed)%6)
				tc.mix(&c)
				c.fitCapacity()
				return c
			}
			v, ran := findViolation(tc.schedules, base, mk)
			if v == nil {
				t.Fatalf("mutation %s: no violation found in %d schedules (base seed %d)", tc.mut, ran, base)
			}
			if !slices.Contains(tc.invariants, v.Invariant) {
				t.Errorf("mutation %s: unexpected invariant %q: %v", tc.mut, v.Invariant, v)
			}
			t.Logf("mutation %s caught within %d schedules: %v", tc.mut, ran, v)
		})
	}
}

// TestUnknownCommitOutcomeRace shows a race in the current protocol and
// that the proposed fix closes it. A commit whose client saw a connection
// error while the server was still committing (a commit stall, e.g.
// synchronous replication, plus a connection reset) is resolved by
// re-reading the checkpoint; the re-read runs before the commit becomes
// visible, concludes "not applied", and the batch is retried under the
// same lease. The retry's fence (FOR KEY SHARE) does not wait for the
// first transaction, reads the old checkpoint, and its checkpoint update
// waits for the first transaction's row lock, then succeeds because the
// version has not changed: the same items are committed twice (and if the
// retry processed fewer items, the checkpoint moves backwards). Comparing
// the fenced position in the checkpoint update (AdvanceCAS) fixes it.
func TestUnknownCommitOutcomeRace(t *testing.T) {
	base := baseSeed(t)
	t.Logf("base seed %d; replay with "+testutil.SeedEnv+"=%d", base, base)
	mk := func(fix bool) func(int64) Config {
		return func(seed int64) Config {
			c := RandomConfig(seed)
			c.Workers = 1 + int(uint64(seed)%3)
			c.Partitions = 1 + int(uint64(seed)%4)
			c.Duration = 20 * c.StaleAfter
			c.Faults = Faults{Stall: 1, Reset: 2, Work: 3, MaxStall: c.StaleAfter / 2}
			c.AdvanceCAS = fix
			c.fitCapacity()
			return c
		}
	}
	v, ran := findViolation(400, base, mk(false))
	if v == nil {
		t.Fatalf("the race was not reproduced in %d schedules (base seed %d)", ran, base)
	}
	// The second commit duplicates the first one's items, and if it
	// processed fewer items, also moves the checkpoint backwards.
	if !slices.Contains([]string{"exactly-once", "checkpoint monotone", "checkpoint exact"}, v.Invariant) {
		reportViolation(t, v, mk(false)(v.Seed))
		t.Fatalf("expected a duplicate, got: %v", v)
	}
	t.Logf("current protocol: race found within %d schedules: %v", ran, v)
	if testing.Verbose() {
		reportViolation(t, v, mk(false)(v.Seed))
	}
	s := runSchedules(200, time.Time{}, base, mk(true))
	if s.first != nil {
		reportViolation(t, s.first, s.firstCfg)
		t.Fatalf("with the checkpoint compare-and-set: %v", s.first)
	}
	t.Logf("with the checkpoint compare-and-set: %d schedules, %d commits, no violation", s.schedules, s.commits)
}

// TestTakeoverBound checks the takeover time documented in package
// distributor: when an owner crashes and a surviving worker has room below
// its fair share, another worker commits the partition's first batch
// within StaleAfter + PollInterval + Confirm × Heartbeat + one batch
// (processing time and a few network round trips). Without such room (all
// survivors at their share or MaxPartitions) the orphan waits for a slot,
// which the default schedules show as latencies above the bound.
func TestTakeoverBound(t *testing.T) {
	base := baseSeed(t)
	t.Logf("base seed %d; replay with "+testutil.SeedEnv+"=%d", base, base)
	mk := func(seed int64) Config {
		c := RandomConfig(seed)
		c.Mode = ModeLock
		c.Faults = Faults{Crash: 0.2, Work: 3}
		c.Workers = 3 + int(uint64(seed)%4)
		c.Partitions = 1 + int(uint64(seed)%2)
		c.MaxPartitions = 8
		return c
	}
	n := 150
	if soak() {
		n *= 20
	}
	var worst float64
	var worstSeed int64
	var count int
	s := runEach(n, time.Time{}, base, mk, func(cfg Config, r Result) {
		cfg.setDefaults()
		slack := cfg.WorkTime + 200*cfg.NetDelay
		for _, l := range r.CleanTakeoverLatencies {
			count++
			ratio := float64(l) / float64(r.TakeoverBound+slack)
			if ratio > worst {
				worst, worstSeed = ratio, cfg.Seed
			}
			if l > r.TakeoverBound+slack {
				t.Errorf("seed %d: takeover took %s, above the bound %s + one batch and round trips %s (%s)", cfg.Seed, l, r.TakeoverBound, slack, cfg)
			}
		}
	})
	if s.first != nil {
		reportViolation(t, s.first, s.firstCfg)
		t.Fatalf("%v", s.first)
	}
	t.Logf("%d schedules, %d single-fault takeovers, worst: %.2f of the bound + one batch (seed %d)", s.schedules, count, worst, worstSeed)
	if count == 0 {
		t.Fatalf("no takeover observed")
	}
}

// TestReplayIsDeterministic checks that a seed replays exactly.
func TestReplayIsDeterministic(t *testing.T) {
	seed := baseSeed(t)
	a, b := Run(RandomConfig(seed)), Run(RandomConfig(seed))
	if a.Events != b.Events || a.Commits != b.Commits || a.Virtual != b.Virtual || a.Items != b.Items ||
		fmt.Sprint(a.Violation) != fmt.Sprint(b.Violation) || !slices.Equal(a.TakeoverLatencies, b.TakeoverLatencies) {
		t.Fatalf("seed %d does not replay: %+v vs %+v", seed, a, b)
	}
}
