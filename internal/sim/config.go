package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// Mode mirrors distributor.Mode: what a worker does with a caught-up
// partition.
type Mode uint8

const (
	// ModeLock releases a partition as soon as it has caught up.
	ModeLock Mode = iota
	// ModeLeader keeps caught-up partitions and waits for new work.
	ModeLeader
)

func (m Mode) String() string {
	if m == ModeLeader {
		return "leader"
	}
	return "lock"
}

// Mutation deliberately breaks one part of the protocol in the model, to
// show that the checker notices. Zero is the real protocol.
type Mutation uint32

const (
	// MutNoFence removes the fence: a batch's first statement neither
	// checks version and owner nor locks the row FOR KEY SHARE, and the
	// checkpoint update does not check the version either ("commit
	// without the version check").
	MutNoFence Mutation = 1 << iota
	// MutClaimNoCAS makes the claim a blind write: it sets version to the
	// candidate's version + 1 and the owner without checking that the row
	// is still at that version, or still claimable.
	MutClaimNoCAS
	// MutNoSafetyMargin computes local deadlines with a zero safety
	// margin, so clock drift is not covered.
	MutNoSafetyMargin
	// MutNoIdleTimeout turns off idle_in_transaction_session_timeout: a
	// transaction left open by a dead or frozen worker keeps its row lock
	// until the server notices the connection is gone, if ever.
	MutNoIdleTimeout
	// MutSegmentWork lets producers add work to segment rows (AddWork
	// refuses a segment's key): a segment then runs on past its end, into
	// items of the next segment or of its partition.
	MutSegmentWork
	// MutRewindStaleSegments makes a rewind look for the partition's
	// segments when it starts, before it waits for the partition's row,
	// so that it misses those a split commits meanwhile: they survive the
	// new generation, claimable (partition.Store.Rewind's statement
	// before it locked the partition first).
	MutRewindStaleSegments
)

func (m Mutation) String() string {
	if m == 0 {
		return "none"
	}
	var s string
	for _, n := range []struct {
		m    Mutation
		name string
	}{{MutNoFence, "no-fence"}, {MutClaimNoCAS, "claim-no-cas"}, {MutNoSafetyMargin, "no-safety-margin"}, {MutNoIdleTimeout, "no-idle-timeout"}, {MutSegmentWork, "segment-work"}, {MutRewindStaleSegments, "rewind-stale-segments"}} {
		if m&n.m != 0 {
			if s != "" {
				s += "+"
			}
			s += n.name
		}
	}
	return s
}

// FaultKind names an injected fault.
type FaultKind int

// Fault kinds.
const (
	FaultCrash          FaultKind = iota // worker process dies for good (a new instance replaces it later)
	FaultPause                           // SIGSTOP: frozen, its monotonic clock keeps running
	FaultSuspend                         // host suspended: frozen, and its monotonic clock stops too
	FaultPartition                       // network between one worker and the store cut or slowed, then healed
	FaultReset                           // a worker's connections reset (RST): replies lost, outcome unknown
	FaultRestart                         // database restart: every session and transaction ends
	FaultStall                           // commits do not complete for a while (WAL / sync-replication stall)
	FaultStop                            // graceful stop (release everything), replaced later
	FaultWork                            // a producer adds work to a partition
	FaultProcessorError                  // a batch fails with a non-transient processor error
	NumFaultKinds
)

var faultNames = [NumFaultKinds]string{"crash", "pause", "suspend", "partition", "reset", "restart", "stall", "stop", "work", "processor-error"}

func (k FaultKind) String() string {
	if k >= 0 && k < NumFaultKinds {
		return faultNames[k]
	}
	return fmt.Sprintf("fault(%d)", int(k))
}

// Faults sets how often each fault is injected during the fault phase.
// Rates are mean events per StaleAfter of virtual time across the whole
// cluster; zero turns a fault off.
type Faults struct {
	Crash     float64
	Pause     float64
	Suspend   float64
	Partition float64
	Reset     float64
	Restart   float64
	Stall     float64
	Stop      float64
	Work      float64
	// ProcessorError is the probability that a batch fails with a
	// non-transient error (the partition backs off, and is quarantined
	// after MaxAttempts).
	ProcessorError float64
	// LongBatch is the probability that a batch's processing takes up to
	// StaleAfter, beyond the idle-in-transaction timeout.
	LongBatch float64
	// MaxPause bounds pauses, suspends and partitions. Defaults to
	// 3 × StaleAfter.
	MaxPause time.Duration
	// MaxStall bounds commit stalls (they do not overlap). Defaults to
	// StaleAfter/2. A stall longer than the transient retry delay
	// (Heartbeat) together with a connection reset exposes the
	// unknown-commit-outcome race described in the package documentation
	// when AdvanceCAS is off.
	MaxStall time.Duration
}

// DefaultFaults is a mix with every fault enabled.
func DefaultFaults() Faults {
	return Faults{
		Crash: 0.05, Pause: 0.1, Suspend: 0.05, Partition: 0.1, Reset: 0.1, Restart: 0.02,
		Stall: 0.05, Stop: 0.03, Work: 2, ProcessorError: 0.005, LongBatch: 0.01,
	}
}

func (f Faults) rate(k FaultKind) float64 {
	switch k {
	case FaultCrash:
		return f.Crash
	case FaultPause:
		return f.Pause
	case FaultSuspend:
		return f.Suspend
	case FaultPartition:
		return f.Partition
	case FaultReset:
		return f.Reset
	case FaultRestart:
		return f.Restart
	case FaultStall:
		return f.Stall
	case FaultStop:
		return f.Stop
	case FaultWork:
		return f.Work
	}
	return 0
}

// Config describes one simulated schedule. Zero fields take the defaults
// noted; Faults' zero value injects no faults.
type Config struct {
	// Seed drives every random choice: the same Config replays the same
	// schedule, event for event.
	Seed int64
	// Workers is the number of worker slots (default 3). A crashed or
	// stopped worker is replaced by a new instance after a while.
	Workers int
	// Partitions is the number of task rows (default 8).
	Partitions int
	// Duration is the fault phase, in virtual time (default 30 ×
	// StaleAfter). A drain phase follows with no new faults and no new
	// work, until everything is processed (checked: liveness).
	Duration time.Duration
	// Drain is how long the drain phase may go without any batch
	// committing while work is pending before liveness is declared
	// violated (default 20 × StaleAfter + MaxBackoff).
	Drain time.Duration
	// MaxEvents caps the events of one schedule (default 5,000,000).
	MaxEvents int

	// Protocol timings, as in distributor.Config. Defaults: Heartbeat
	// 200ms, StaleAfter 1s, Confirm 3, SafetyMargin max(Heartbeat/2,
	// StaleAfter/5), PollInterval Heartbeat, RebalanceInterval 5 ×
	// Heartbeat, ShutdownTimeout StaleAfter, BatchSize 20, MaxPartitions
	// 8, MaxAttempts 5, Backoff Heartbeat, MaxBackoff 2 × StaleAfter.
	Heartbeat         time.Duration
	StaleAfter        time.Duration
	Confirm           int
	SafetyMargin      time.Duration
	PollInterval      time.Duration
	RebalanceInterval time.Duration
	// SpreadTakeovers is distributor.Config.SpreadTakeovers: how long a
	// worker leaves a dead worker's partitions beyond its share to the
	// others (default 2 × PollInterval; negative: takes them at once).
	SpreadTakeovers time.Duration
	ShutdownTimeout time.Duration
	BatchSize       int
	MaxPartitions   int
	MaxAttempts     int
	Backoff         time.Duration
	MaxBackoff      time.Duration
	Mode            Mode

	// Server-side limits, as distributor.Config.ConnectionLimits sets
	// them: IdleTxTimeout StaleAfter/2, LockTimeout StaleAfter/4,
	// StatementTimeout StaleAfter/2.
	IdleTxTimeout    time.Duration
	LockTimeout      time.Duration
	StatementTimeout time.Duration

	// Drift bounds each worker's clock rate error relative to the
	// database clock (default 0.005: ±0.5%).
	Drift float64
	// NetDelay is the usual largest one-way network delay (default 2ms;
	// a few messages take up to 20 times longer).
	NetDelay time.Duration
	// WorkTime is the largest processing time of a batch, by the worker's
	// clock (default StaleAfter/10).
	WorkTime time.Duration

	Faults Faults

	// Mutation breaks the protocol on purpose (see Mutation).
	Mutation Mutation
	// AdvanceCAS makes the checkpoint update also compare the position read
	// under the fence, as the implementation does, so a batch can never
	// commit on top of a checkpoint that moved after it was read. Off, it
	// models the earlier version-only update and its race.
	AdvanceCAS bool
	// ClaimWithBatch claims an unowned candidate inside the transaction of
	// its first batch, as the implementation does (distributor's
	// runClaim): fence the unowned row, process, claim and advance (and
	// release when caught up in lock mode) in one statement, commit. Off,
	// every claim is a statement of its own, as before.
	ClaimWithBatch bool

	// SegmentRecords makes the processor a Splitter (distributor.Splitter,
	// Config.SegmentRecords): a held partition's batch that finds more
	// than 2 × SegmentRecords items pending on a partition that is not a
	// segment splits them, in its fenced transaction, into segment rows of
	// about SegmentRecords items at SplitChunk boundaries (the pricer's
	// rule: a segment starts at a chunk boundary at least SegmentRecords
	// after the previous start, leaving at least SegmentRecords/2 for the
	// last) and moves the partition's checkpoint past them. Zero: never
	// split.
	SegmentRecords int64
	// SplitChunk is the distance between the positions a segment may
	// start at (the pricer's chunks of records; default 1).
	SplitChunk int64
	// ItemTime makes the processor run at a fixed rate: a batch of n items
	// takes n × ItemTime of its worker's time, batches always take the
	// whole limit, and a worker processes one batch at a time (its
	// batches queue for it); a split takes what a batch of the limit
	// takes. Zero: each batch takes a random time up to WorkTime, and a
	// worker's partitions are processed at the same time.
	ItemTime time.Duration
	// Work, if set, gives each partition's items at the start (one entry
	// per partition) instead of a random backlog.
	Work []int64

	// Trace records a line per protocol step in Result.Trace.
	Trace bool
}

func orDur(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func orInt(n, def int) int {
	if n == 0 {
		return def
	}
	return n
}

func (c *Config) setDefaults() {
	c.Workers = orInt(c.Workers, 3)
	c.Partitions = orInt(c.Partitions, 8)
	c.Heartbeat = orDur(c.Heartbeat, 200*time.Millisecond)
	c.StaleAfter = orDur(c.StaleAfter, time.Second)
	c.Confirm = orInt(c.Confirm, 3)
	c.SafetyMargin = orDur(c.SafetyMargin, max(c.Heartbeat/2, c.StaleAfter/5))
	c.PollInterval = orDur(c.PollInterval, c.Heartbeat)
	c.RebalanceInterval = orDur(c.RebalanceInterval, 5*c.Heartbeat)
	c.SpreadTakeovers = orDur(c.SpreadTakeovers, 2*c.PollInterval)
	c.ShutdownTimeout = orDur(c.ShutdownTimeout, c.StaleAfter)
	c.BatchSize = orInt(c.BatchSize, 20)
	c.MaxPartitions = orInt(c.MaxPartitions, 8)
	c.MaxAttempts = orInt(c.MaxAttempts, 5)
	c.Backoff = orDur(c.Backoff, c.Heartbeat)
	c.MaxBackoff = orDur(c.MaxBackoff, 2*c.StaleAfter)
	c.IdleTxTimeout = orDur(c.IdleTxTimeout, c.StaleAfter/2)
	c.LockTimeout = orDur(c.LockTimeout, c.StaleAfter/4)
	c.StatementTimeout = orDur(c.StatementTimeout, c.StaleAfter/2)
	if c.Drift == 0 {
		c.Drift = 0.005
	}
	c.NetDelay = orDur(c.NetDelay, 2*time.Millisecond)
	c.WorkTime = orDur(c.WorkTime, c.StaleAfter/10)
	c.Duration = orDur(c.Duration, 30*c.StaleAfter)
	c.Drain = orDur(c.Drain, 20*c.StaleAfter+c.MaxBackoff)
	c.MaxEvents = orInt(c.MaxEvents, 5_000_000)
	c.Faults.MaxPause = orDur(c.Faults.MaxPause, 3*c.StaleAfter)
	c.Faults.MaxStall = orDur(c.Faults.MaxStall, c.StaleAfter/2)
	if c.SplitChunk == 0 {
		c.SplitChunk = 1
	}
}

// Validate reports configurations the real distributor would reject, or
// that the model cannot run.
func (c Config) Validate() error {
	c.setDefaults()
	switch {
	case c.Workers < 1 || c.Partitions < 1:
		return fmt.Errorf("need at least one worker and one partition")
	case c.Heartbeat <= 0 || c.StaleAfter < 3*c.Heartbeat:
		return fmt.Errorf("stale-after (%s) must be at least 3 × heartbeat (%s)", c.StaleAfter, c.Heartbeat)
	case c.SafetyMargin <= 0 || c.SafetyMargin >= c.StaleAfter-c.Heartbeat:
		return fmt.Errorf("safety margin (%s) must be positive and below stale-after − heartbeat", c.SafetyMargin)
	case c.Confirm < 1 || c.BatchSize < 1 || c.MaxPartitions < 1 || c.MaxAttempts < 1:
		return fmt.Errorf("confirm, batch size, max partitions and max attempts must be positive")
	case c.Drift < 0 || c.Drift >= 0.5:
		return fmt.Errorf("drift %g out of range [0, 0.5)", c.Drift)
	case c.SegmentRecords < 0 || c.SplitChunk < 1 || c.ItemTime < 0:
		return fmt.Errorf("segment records, split chunk and item time must not be negative (split chunk positive)")
	case c.Work != nil && len(c.Work) != c.Partitions:
		return fmt.Errorf("work for %d partitions, but %d partitions", len(c.Work), c.Partitions)
	}
	return nil
}

// String is a one-line description of the schedule's parameters.
func (c Config) String() string {
	c.setDefaults()
	return fmt.Sprintf("seed=%d workers=%d partitions=%d mode=%s heartbeat=%s stale=%s confirm=%d margin=%s poll=%s batch=%d maxp=%d drift=±%.2f%% net≤%s work≤%s duration=%s faults={crash %.2f pause %.2f suspend %.2f partition %.2f reset %.2f restart %.2f stall %.2f (≤%s) stop %.2f work %.2f procerr %.3f long %.3f}/stale mutation=%s advance-cas=%v claim-with-batch=%v segment-records=%d split-chunk=%d item-time=%s",
		c.Seed, c.Workers, c.Partitions, c.Mode, c.Heartbeat, c.StaleAfter, c.Confirm, c.SafetyMargin, c.PollInterval,
		c.BatchSize, c.MaxPartitions, c.Drift*100, c.NetDelay, c.WorkTime, c.Duration,
		c.Faults.Crash, c.Faults.Pause, c.Faults.Suspend, c.Faults.Partition, c.Faults.Reset, c.Faults.Restart,
		c.Faults.Stall, c.Faults.MaxStall, c.Faults.Stop, c.Faults.Work, c.Faults.ProcessorError, c.Faults.LongBatch, c.Mutation, c.AdvanceCAS, c.ClaimWithBatch, c.SegmentRecords, c.SplitChunk, c.ItemTime)
}

// RandomConfig derives a whole schedule configuration from seed: worker
// and partition counts, timings (often the fast 200ms/1s/3 and the default
// 1s/10s/3 profiles), clock drift, mode and a fault mix. Run(RandomConfig(s))
// replays schedule s exactly.
func RandomConfig(seed int64) Config {
	r := rand.New(rand.NewPCG(uint64(seed), 0x6261746f6e636667))
	c := Config{Seed: seed}
	c.Workers = 1 + r.IntN(8)
	c.Partitions = 1 + r.IntN(30)
	switch p := r.IntN(10); {
	case p < 4:
		c.Heartbeat, c.StaleAfter, c.Confirm = 200*time.Millisecond, time.Second, 3
	case p < 6:
		c.Heartbeat, c.StaleAfter, c.Confirm = time.Second, 10*time.Second, 3
	default:
		c.Heartbeat = []time.Duration{50, 100, 200, 500}[r.IntN(4)] * time.Millisecond
		c.StaleAfter = c.Heartbeat * time.Duration(3+r.IntN(10))
		c.Confirm = 1 + r.IntN(4)
	}
	c.Drift = 0.001 + 0.009*r.Float64()
	if r.IntN(3) == 0 {
		// A margin other than the default, but one that still covers the
		// drift: (1 − drift) × StaleAfter ≥ StaleAfter − margin.
		// It also leaves two heartbeats between a renewal and its
		// deadline: distributor.Config.Validate accepts margins up to
		// StaleAfter − Heartbeat, but then every renewal must complete
		// within StaleAfter − margin − Heartbeat of being sent, and a
		// takeover needing Confirm renewals can livelock (claim, dropped
		// locally before confirmation, expires, claimed again…).
		lo := max(c.Heartbeat/10, time.Duration(2*c.Drift*float64(c.StaleAfter)))
		hi := c.StaleAfter - 2*c.Heartbeat
		if hi > lo {
			c.SafetyMargin = lo + time.Duration(r.Int64N(int64(hi-lo)))
		}
	}
	if r.IntN(4) == 0 {
		c.PollInterval = c.Heartbeat/2 + time.Duration(r.Int64N(int64(c.Heartbeat)*3/2))
	}
	if r.IntN(4) == 0 {
		c.Mode = ModeLeader
	}
	c.BatchSize = []int{1, 2, 5, 10, 20, 50}[r.IntN(6)]
	if r.IntN(4) == 0 {
		c.MaxPartitions = 1 + r.IntN(8)
	}
	c.fitCapacity()
	c.NetDelay = []time.Duration{500 * time.Microsecond, 2 * time.Millisecond, 5 * time.Millisecond, c.Heartbeat / 20}[r.IntN(4)]
	c.WorkTime = c.StaleAfter / time.Duration([]int{5, 10, 50}[r.IntN(3)])
	c.Duration = c.StaleAfter * time.Duration(20+r.IntN(21))
	base := DefaultFaults()
	pick := func(v float64) float64 {
		switch r.IntN(5) {
		case 0:
			return 0
		case 1:
			return v * 4 * r.Float64()
		default:
			return v * 2 * r.Float64()
		}
	}
	c.Faults = Faults{
		Crash: pick(base.Crash), Pause: pick(base.Pause), Suspend: pick(base.Suspend),
		Partition: pick(base.Partition), Reset: pick(base.Reset), Restart: pick(base.Restart),
		Stall: pick(base.Stall), Stop: pick(base.Stop), Work: pick(base.Work),
		ProcessorError: pick(base.ProcessorError), LongBatch: pick(base.LongBatch),
	}
	// Drawn last, so the fields above are those of earlier versions.
	c.ClaimWithBatch = r.IntN(4) != 0
	// A Splitter processor in a third of the schedules, with segments
	// small enough that backlogs and the work producers add get split,
	// often more than once. Drawn after the fields above: a schedule
	// without splits is the one earlier versions ran.
	if r.IntN(3) == 0 {
		c.SegmentRecords = 1 + r.Int64N(int64(3*c.BatchSize))
		c.SplitChunk = 1 + r.Int64N(max(1, c.SegmentRecords/2))
	}
	return c
}

// fitCapacity gives leader-mode schedules a slot for every partition. A
// leader keeps its caught-up partitions and hands one back only when above
// its fair share, which MaxPartitions caps: with fewer slots (workers ×
// MaxPartitions) than partitions, the others wait for ever while the
// leaders idle. That is a capacity limit of leader mode, not a safety
// fault, so the liveness check does not apply to such schedules.
func (c *Config) fitCapacity() {
	if slots := c.Workers * orInt(c.MaxPartitions, 8); c.Mode == ModeLeader && slots < c.Partitions {
		c.Partitions = slots
	}
}

// Result is what one schedule did and found.
type Result struct {
	Seed    int64
	Events  int           // events executed
	Virtual time.Duration // virtual time simulated
	Faults  [NumFaultKinds]int
	Workers int // worker instances started
	Claims  int // claims won
	// ClaimsWithBatch counts the claims committed with their first batch
	// (Config.ClaimWithBatch), included in Claims.
	ClaimsWithBatch int
	Takeover        int // claims of a row whose owner's lease had expired
	Commits         int // batches committed
	Items           int64
	// WorkerItems is the items each worker instance committed, by its id.
	WorkerItems map[int]int64
	// ItemsChecked counts items verified exactly once at the end (all
	// available work of every partition, when the schedule drained).
	ItemsChecked int64
	Releases     int
	Fenced       int // batches that ended because the fence found a newer claim
	Lost         int // leases lost (ownership lost or local deadline)
	Failures     int // failures recorded (processor errors, idle timeouts…)
	// FailureCauses counts the failures workers tried to record, by the
	// error that made the batch fail (see ErrorNames).
	FailureCauses map[string]int
	// StaleStatements counts batch statements that reached the database
	// for a claim that was no longer current (all must have been refused
	// or rolled back).
	StaleStatements int
	// LateWrites counts writes a worker issued after its local deadline,
	// right after resuming from a pause (the Go timer race); allowed, and
	// harmless because of the fence.
	LateWrites int
	// ResolvedCommits counts commits whose outcome was unknown and was
	// resolved by re-reading the checkpoint.
	ResolvedCommits int
	// Splits counts the splits committed, Segments the segment rows they
	// wrote, SegmentClaims the claims of segment rows.
	Splits, Segments, SegmentClaims int
	// SplitKeyConflicts counts split statements that found a segment's
	// key taken by another transaction's split (committed, or waited for).
	SplitKeyConflicts int
	// LastCommit is the virtual time of the last batch committed.
	LastCommit time.Duration
	// TakeoverLatencies are, for each partition with pending work whose
	// owner crashed, froze or was cut off, the virtual time from that
	// fault to the first batch another worker committed on it.
	TakeoverLatencies []time.Duration
	// CleanTakeoverLatencies are those where another worker was up when
	// the owner failed and no other fault was injected until the
	// takeover's first commit.
	CleanTakeoverLatencies []time.Duration
	// TakeoverBound is StaleAfter + PollInterval + Confirm × Heartbeat,
	// the documented takeover time before the first batch.
	TakeoverBound time.Duration
	// Drained reports that all work was processed in the drain phase.
	Drained bool
	// Truncated reports that MaxEvents stopped the schedule.
	Truncated bool
	// Violation is the first invariant violation, or nil.
	Violation *Violation
	// Trace holds the protocol steps when Config.Trace is set.
	Trace []string
}

// Err returns the first violation as an error, or nil.
func (r Result) Err() error {
	if r.Violation == nil {
		return nil
	}
	return r.Violation
}

// Violation is a failed invariant.
type Violation struct {
	Seed      int64
	Event     int           // index of the event during which it was found
	At        time.Duration // virtual time
	Invariant string
	Partition int // -1 if none in particular
	Msg       string
}

func (v *Violation) Error() string {
	return fmt.Sprintf("seed %d, event %d, t=%s: invariant %q violated: %s", v.Seed, v.Event, v.At, v.Invariant, v.Msg)
}

// Percentile returns the p-th percentile (0–100) of ds by nearest rank.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}
