package main

import (
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// scenarioNames are the scenarios in the order they run.
var scenarioNames = []string{"throughput", "events", "peers", "coordination", "failover", "horizon", "micro", "profile", "scale", "shapes", "rerate", "latency", "segtakeover", "versions"}

// optInScenarios run only when named: they take far longer than the rest
// (scale loads, prices and exports 100M records; shapes seeds, loads and
// prices six data sets of 1M records, each with its ceiling; rerate prices
// 1M records, re-prices a tenth, and amends a 100,000-record contract;
// latency processes 6M items eight times with a stand-in processor;
// segtakeover seeds 1M records and kills a worker holding segments 12
// times; versions starts a server of every PostgreSQL major in turn and
// runs the shapes table and the crash series on each).
var optInScenarios = []string{"scale", "shapes", "rerate", "latency", "segtakeover", "versions"}

// config holds every knob of a report run. Defaults finish the full run in
// about 15 minutes on a 2-core machine; -quick scales everything down to a
// smoke run of about 2 minutes.
type config struct {
	out   string
	quick bool
	// previous is an earlier results.json shown beside this run's headline.
	previous string
	seed     uint64
	durable  bool
	keep     bool
	profile  string // auto, always, never
	render   bool
	merge    bool

	// throughput
	contracts   int
	perContract int
	workers     intList
	repeat      int

	// events
	eventsRepeat int

	// horizon, scale and shapes (their own files)
	horizon horizonConfig
	scale   scaleConfig
	shapes  shapesConfig
	rerate  rerateConfig
	latency latencyConfig
	segtake segTakeConfig
	// versions: a private server of each major, back to back
	versions versionsConfig

	// peers
	peerWorkers   intList
	peerConc      int
	faultWorkers  int
	faultContr    int
	faultPerContr int
	faultBatch    int
	giveUp        time.Duration
	hardened      bool

	// coordination
	coordWorkers    intList
	coordParts      intList
	coordHeld       intList
	coordDuration   time.Duration
	coordInterval   time.Duration
	coordConns      int
	claimers        intList
	claimBatches    intList
	claimDuration   time.Duration
	tinyContracts   int
	heartbeatSample int
	coordCellsOnly  bool
	coordTinyOnly   bool
	coordSettle     time.Duration

	// failover
	foWorkers       int
	foContracts     int
	foBatch         int
	killsFast       int
	killsDefault    int
	handoffsFast    int
	handoffsDefault int

	// micro
	benchtime string

	scenarios   []string
	commandLine string
}

// intList is a comma-separated list of integers as a flag.
type intList []int

func (l *intList) String() string {
	s := make([]string, len(*l))
	for i, v := range *l {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}

func (l *intList) Set(v string) error {
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("%q: want positive integers separated by commas", v)
		}
		out = append(out, n)
	}
	*l = out
	return nil
}

func defaultConfig() config {
	return config{
		seed: 1, durable: true, profile: "auto",
		contracts: 1000, perContract: 1000, workers: intList{1, 2, 4}, repeat: 1, eventsRepeat: 3,
		peerWorkers: intList{2}, peerConc: 8,
		faultWorkers: 3, faultContr: 12, faultPerContr: 10000, faultBatch: 200,
		giveUp: 60 * time.Second, hardened: true,
		coordWorkers: intList{10, 100, 1000}, coordParts: intList{10_000, 100_000},
		coordHeld: intList{1, 10, 100, 1000}, coordDuration: 5 * time.Second,
		coordInterval: time.Second, coordConns: 64, coordSettle: time.Minute,
		claimers: intList{1, 4}, claimBatches: intList{1, 16}, claimDuration: 4 * time.Second,
		tinyContracts: 10000, heartbeatSample: 200,
		foWorkers: 3, foContracts: 12, foBatch: 100,
		killsFast: 20, killsDefault: 10, handoffsFast: 10, handoffsDefault: 4,
		benchtime: "1s",
	}
}

// quickConfig is the ~2 minute smoke version of the defaults.
func (c *config) applyQuick(set map[string]bool) {
	q := func(name string, apply func()) {
		if !set[name] {
			apply()
		}
	}
	q("contracts", func() { c.contracts = 200 })
	q("records-per-contract", func() { c.perContract = 500 })
	q("workers", func() { c.workers = intList{1, 2} })
	q("events-repeat", func() { c.eventsRepeat = 1 })
	q("peer-workers", func() { c.peerWorkers = intList{2} })
	q("fault-contracts", func() { c.faultContr = 12 })
	q("fault-records-per-contract", func() { c.faultPerContr = 2000 })
	q("give-up", func() { c.giveUp = 5 * time.Second })
	q("hardened", func() { c.hardened = false })
	q("coord-workers", func() { c.coordWorkers = intList{10, 100} })
	q("coord-partitions", func() { c.coordParts = intList{2000} })
	q("coord-held", func() { c.coordHeld = intList{1, 100} })
	q("coord-duration", func() { c.coordDuration = 2 * time.Second })
	q("claimers", func() { c.claimers = intList{2} })
	q("claim-duration", func() { c.claimDuration = 2 * time.Second })
	q("tiny-contracts", func() { c.tinyContracts = 500 })
	q("heartbeat-samples", func() { c.heartbeatSample = 30 })
	q("kills-fast", func() { c.killsFast = 3 })
	q("kills-default", func() { c.killsDefault = 0 })
	q("handoffs-fast", func() { c.handoffsFast = 2 })
	q("handoffs-default", func() { c.handoffsDefault = 0 })
	q("benchtime", func() { c.benchtime = "100x" })
}

func parseConfig(args []string) (config, error) {
	c := defaultConfig()
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run . [flags] [scenario...]\nscenarios: %s (default: all; profile runs when a goal is missed)\n\nflags:\n",
			strings.Join(scenarioNames, " "))
		fs.PrintDefaults()
	}
	fs.StringVar(&c.out, "out", c.out, "directory for report.md, results.json and the plots (default bench/results in the repository)")
	fs.BoolVar(&c.quick, "quick", false, "smoke run (~2 minutes): smaller sizes unless set explicitly")
	fs.Uint64Var(&c.seed, "seed", c.seed, "seed of the synthetic data")
	fs.BoolVar(&c.durable, "durable", c.durable, "private server with fsync and synchronous_commit on (ignored with DATABASE_URL)")
	fs.BoolVar(&c.keep, "keep", false, "keep the private server's data directory and the worker logs")
	fs.StringVar(&c.profile, "profile", c.profile, "CPU profiles: auto (when a goal is missed), always, never")
	fs.BoolVar(&c.render, "render", false, "only re-render report.md and the plots from -out's results.json")
	fs.BoolVar(&c.merge, "merge", false, "keep -out's results.json and replace only the scenarios run now")
	c.horizon.flags(fs)
	c.scale.flags(fs)
	c.shapes.flags(fs)
	c.rerate.flags(fs)
	c.latency.flags(fs)
	c.segtake.flags(fs)
	c.versions.flags(fs)
	fs.StringVar(&c.previous, "previous", "", "an earlier results.json whose headline figures are shown beside the new ones")

	fs.IntVar(&c.contracts, "contracts", c.contracts, "throughput: contracts")
	fs.IntVar(&c.perContract, "records-per-contract", c.perContract, "throughput: records per contract")
	fs.Var(&c.workers, "workers", "throughput: baton worker process counts")
	fs.IntVar(&c.repeat, "repeat", c.repeat, "throughput: repetitions of every configuration (the median is reported)")
	fs.IntVar(&c.eventsRepeat, "events-repeat", c.eventsRepeat, "events: pairs of runs with and without the events table per data set")

	fs.Var(&c.peerWorkers, "peer-workers", "peers: worker process counts for the throughput of each peer design")
	fs.IntVar(&c.peerConc, "peer-concurrency", c.peerConc, "peers: contracts processed at once per peer process (baton's --max-partitions default)")
	fs.IntVar(&c.faultWorkers, "fault-workers", c.faultWorkers, "peers: worker processes in the SIGKILL/SIGSTOP experiments")
	fs.IntVar(&c.faultContr, "fault-contracts", c.faultContr, "peers: contracts in the SIGKILL/SIGSTOP experiments")
	fs.IntVar(&c.faultPerContr, "fault-records-per-contract", c.faultPerContr, "peers: records per contract in the SIGKILL/SIGSTOP experiments")
	fs.IntVar(&c.faultBatch, "fault-batch-size", c.faultBatch, "peers: batch size in the SIGKILL/SIGSTOP experiments (all designs)")
	fs.DurationVar(&c.giveUp, "give-up", c.giveUp, "peers: how long to wait for another worker to resume a contract")
	fs.BoolVar(&c.hardened, "hardened", c.hardened, "peers: also run the peers with server-side session timeouts")

	fs.Var(&c.coordWorkers, "coord-workers", "coordination: simulated worker counts")
	fs.Var(&c.coordParts, "coord-partitions", "coordination: partition counts")
	fs.Var(&c.coordHeld, "coord-held", "coordination: partitions held by one worker for the heartbeat latency series")
	fs.DurationVar(&c.coordDuration, "coord-duration", c.coordDuration, "coordination: measuring time per cell")
	fs.DurationVar(&c.coordInterval, "coord-interval", c.coordInterval, "coordination: heartbeat and poll interval of the simulated workers")
	fs.DurationVar(&c.coordSettle, "coord-settle", c.coordSettle, "coordination: longest wait for busy workers to claim their share before a cell's window")
	fs.IntVar(&c.coordConns, "coord-conns", c.coordConns, "coordination: database connections shared by the simulated workers")
	fs.Var(&c.claimers, "claimers", "coordination: goroutines in the claim-throughput loop")
	fs.Var(&c.claimBatches, "claim-batches", "coordination: partitions per claim statement in the claim-throughput loop")
	fs.DurationVar(&c.claimDuration, "claim-duration", c.claimDuration, "coordination: measuring time per claim-throughput cell")
	fs.IntVar(&c.tinyContracts, "tiny-contracts", c.tinyContracts, "coordination: one-record contracts priced end to end by 2 real workers (claims/s)")
	fs.BoolVar(&c.coordCellsOnly, "coord-cells-only", false, "coordination: measure only the simulated-worker cells (no heartbeat series, claim loop, one-record contracts or pgbench)")
	fs.BoolVar(&c.coordTinyOnly, "coord-tiny-only", false, "coordination: measure only the one-record contracts and pgbench (no simulated-worker cells, heartbeat series or claim loop)")
	fs.IntVar(&c.heartbeatSample, "heartbeat-samples", c.heartbeatSample, "coordination: heartbeats timed per held-partition count")

	fs.IntVar(&c.foWorkers, "failover-workers", c.foWorkers, "failover: worker processes")
	fs.IntVar(&c.foContracts, "failover-contracts", c.foContracts, "failover: contracts (kept busy by a producer)")
	fs.IntVar(&c.foBatch, "failover-batch-size", c.foBatch, "failover: --batch-size of the workers")
	fs.IntVar(&c.killsFast, "kills-fast", c.killsFast, "failover: SIGKILLs at --heartbeat 200ms --stale-after 1s --confirm 3")
	fs.IntVar(&c.killsDefault, "kills-default", c.killsDefault, "failover: SIGKILLs at the default timing (1s/10s/3)")
	fs.IntVar(&c.handoffsFast, "handoffs-fast", c.handoffsFast, "failover: SIGTERM hand-offs at the fast timing")
	fs.IntVar(&c.handoffsDefault, "handoffs-default", c.handoffsDefault, "failover: SIGTERM hand-offs at the default timing")

	fs.StringVar(&c.benchtime, "benchtime", c.benchtime, "micro: go test -benchtime")

	if err := fs.Parse(args); err != nil {
		return c, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if c.quick {
		c.applyQuick(set)
		c.shapes.applyQuick()
		c.rerate.applyQuick()
		c.latency.applyQuick()
		c.segtake.applyQuick()
		c.versions.applyQuick()
	}
	if c.profile != "auto" && c.profile != "always" && c.profile != "never" {
		return c, fmt.Errorf("-profile %q: want auto, always or never", c.profile)
	}
	if c.contracts < 1 || c.perContract < 1 || c.repeat < 1 || c.faultWorkers < 2 || c.foWorkers < 2 {
		return c, fmt.Errorf("sizes must be positive and the fault and failover experiments need at least 2 workers")
	}
	if err := c.versions.validate(); err != nil {
		return c, err
	}
	if c.coordCellsOnly && c.coordTinyOnly {
		return c, fmt.Errorf("-coord-cells-only and -coord-tiny-only exclude each other")
	}
	c.scenarios = fs.Args()
	if len(c.scenarios) == 0 {
		for _, s := range scenarioNames {
			if !slices.Contains(optInScenarios, s) {
				c.scenarios = append(c.scenarios, s)
			}
		}
	} else if slices.Contains(c.scenarios, "profile") && !set["profile"] {
		// Asked for by name: profile whether or not a goal was missed.
		c.profile = "always"
	}
	for _, s := range c.scenarios {
		if !slices.Contains(scenarioNames, s) {
			return c, fmt.Errorf("unknown scenario %q (want %s)", s, strings.Join(scenarioNames, ", "))
		}
	}
	return c, nil
}

func (c config) runs(name string) bool { return slices.Contains(c.scenarios, name) }
