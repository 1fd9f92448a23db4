package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// event is one scheduled step. Events at the same virtual time run in the
// order they were scheduled (seq), so a run is a pure function of the seed.
type event struct {
	at  time.Duration
	seq uint64
	fn  func()
}

type eventHeap []event

func (h eventHeap) less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}

func (h *eventHeap) push(e event) {
	*h = append(*h, e)
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if !q.less(i, p) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *eventHeap) pop() event {
	q := *h
	top := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q[n] = event{}
	q = q[:n]
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && q.less(r, l) {
			m = r
		}
		if !q.less(m, i) {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	*h = q
	return top
}

const (
	phaseFaults = iota
	phaseDrain
	phaseDone
)

type latencyStart struct {
	at     time.Duration
	owner  int
	faults int  // faults injected so far
	others bool // another worker was up and claiming
}

// sim is one schedule.
type sim struct {
	cfg    Config
	rng    *rand.Rand
	now    time.Duration
	seq    uint64
	q      eventHeap
	events int

	st       *store
	workers  []*worker // every instance, by id-1
	slots    []*worker // current instance of each slot, nil while down
	nextConn int
	phase    int
	margin   time.Duration // the safety margin workers use

	latStart     map[int]latencyStart
	faultCount   int // worker and database faults injected
	caughtUpAt   time.Duration
	lastProgress time.Duration // last batch committed
	res          Result
	viol         *Violation
}

// Run simulates the schedule cfg describes and checks the invariants at
// every step. It is deterministic: the same cfg gives the same Result.
func Run(cfg Config) Result {
	cfg.setDefaults()
	s := &sim{
		cfg:      cfg,
		rng:      rand.New(rand.NewPCG(uint64(cfg.Seed), 0x62617430)),
		latStart: map[int]latencyStart{},
	}
	s.margin = cfg.SafetyMargin
	if cfg.Mutation&MutNoSafetyMargin != 0 {
		s.margin = 0
	}
	s.res.Seed = cfg.Seed
	s.res.TakeoverBound = cfg.StaleAfter + cfg.PollInterval + time.Duration(cfg.Confirm)*cfg.Heartbeat
	if err := cfg.Validate(); err != nil && cfg.Mutation == 0 {
		s.violate("config", -1, "%v", err)
		return s.res
	}
	s.st = newStore(s)
	s.setup()
	s.loop()
	s.res.Events = s.events
	s.res.Virtual = s.now
	s.res.Violation = s.viol
	return s.res
}

func (s *sim) at(t time.Duration, fn func()) {
	s.seq++
	s.q.push(event{at: t, seq: s.seq, fn: fn})
}

func (s *sim) after(d time.Duration, fn func()) { s.at(s.now+d, fn) }

func (s *sim) loop() {
	for len(s.q) > 0 && s.viol == nil && s.phase != phaseDone {
		if s.events >= s.cfg.MaxEvents {
			s.res.Truncated = true
			return
		}
		e := s.q.pop()
		s.now = e.at
		s.events++
		e.fn()
	}
}

func (s *sim) violate(invariant string, key int, format string, args ...any) {
	if s.viol != nil {
		return
	}
	s.viol = &Violation{Seed: s.cfg.Seed, Event: s.events, At: s.now, Invariant: invariant, Partition: key,
		Msg: fmt.Sprintf(format, args...)}
	s.tracef("VIOLATION %s: %s", invariant, s.viol.Msg)
}

func (s *sim) tracef(format string, args ...any) {
	if s.cfg.Trace {
		s.res.Trace = append(s.res.Trace, fmt.Sprintf("%12s #%-7d %s", s.now, s.events, fmt.Sprintf(format, args...)))
	}
}

// randDur is uniform in [lo, hi].
func (s *sim) randDur(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(s.rng.Int64N(int64(hi-lo)+1))
}

// logDur is log-uniform in [lo, hi]: short and long values alike.
func (s *sim) logDur(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	f := math.Log(float64(lo)) + s.rng.Float64()*(math.Log(float64(hi))-math.Log(float64(lo)))
	return time.Duration(math.Exp(f))
}

func (s *sim) expDur(mean time.Duration) time.Duration {
	return time.Duration(s.rng.ExpFloat64() * float64(mean))
}

func (s *sim) setup() {
	cfg := s.cfg
	for k := 0; k < cfg.Partitions; k++ {
		r := s.st.rows[k]
		if cfg.Work != nil {
			r.available = cfg.Work[k]
			continue
		}
		r.available = int64(s.rng.IntN(4 * cfg.BatchSize * (1 + s.rng.IntN(4))))
	}
	s.slots = make([]*worker, cfg.Workers)
	for i := range s.slots {
		s.after(s.randDur(0, cfg.Heartbeat), func() { s.startWorker(i) })
	}
	for k := FaultKind(0); k < NumFaultKinds; k++ {
		s.scheduleFault(k)
	}
	s.after(5*cfg.StaleAfter, s.operatorRetry)
	s.at(cfg.Duration, s.startDrain)
}

// ---- network ----------------------------------------------------------

// conn is one client connection (a database/sql connection of a worker),
// or a store-internal pseudo-connection (w == nil) for producers and the
// operator. Messages are delivered in order in each direction, as TCP
// does; a reset drops whatever has not been delivered yet.
type conn struct {
	id   int
	w    *worker
	sess *session

	upSent, upNext     uint64
	downSent, downNext uint64
	upBox              map[uint64]*request
	downBox            map[uint64]response

	closed bool    // the client closed it
	broken errKind // the client saw the session end: the next use fails so
	reset  bool    // RST: nothing more is delivered either way
	rpc    *rpc    // the client's outstanding call

	internal func(response) // reply sink of internal connections
}

func (s *sim) newConn(w *worker) *conn {
	s.nextConn++
	c := &conn{id: s.nextConn, w: w}
	if w != nil {
		w.conns = append(w.conns, c)
	}
	return c
}

// netDelay is one message's one-way delay to or from w.
func (s *sim) netDelay(w *worker) time.Duration {
	d := s.randDur(s.cfg.NetDelay/10, s.cfg.NetDelay)
	if s.rng.IntN(50) == 0 {
		d *= time.Duration(2 + s.rng.IntN(19))
	}
	if w.partitioned && w.partSlow {
		d += s.randDur(0, s.cfg.StaleAfter/2)
	}
	return d
}

// transmit schedules delivery of a message to or from w after a network
// delay; while w is cut off, messages wait for the network to heal (TCP
// retransmits them) unless the connection is reset meanwhile.
func (s *sim) transmit(w *worker, c *conn, deliver func()) {
	var arrive func()
	arrive = func() {
		if c.reset {
			return
		}
		if w.partitioned && !w.partSlow {
			s.at(max(w.healAt, s.now)+s.netDelay(w), arrive)
			return
		}
		deliver()
	}
	s.after(s.netDelay(w), arrive)
}

// sendUp sends a request from the client side of c to the store.
func (s *sim) sendUp(c *conn, req *request) {
	if c.w == nil {
		s.after(0, func() { s.st.arrive(c, req) })
		return
	}
	seq := c.upSent
	c.upSent++
	s.transmit(c.w, c, func() {
		if seq == c.upNext && len(c.upBox) == 0 {
			c.upNext++
			s.st.arrive(c, req)
			return
		}
		if c.upBox == nil {
			c.upBox = map[uint64]*request{}
		}
		c.upBox[seq] = req
		for {
			r, ok := c.upBox[c.upNext]
			if !ok {
				return
			}
			delete(c.upBox, c.upNext)
			c.upNext++
			if c.reset {
				return
			}
			s.st.arrive(c, r)
		}
	})
}

// sendDown sends a response from the store to the client side of c.
func (s *sim) sendDown(c *conn, resp response) {
	if c.w == nil {
		if c.internal != nil {
			f := c.internal
			s.after(0, func() { f(resp) })
		}
		return
	}
	seq := c.downSent
	c.downSent++
	s.transmit(c.w, c, func() {
		if seq == c.downNext && len(c.downBox) == 0 {
			c.downNext++
			c.w.post(c, func() { c.w.receive(c, resp) })
			return
		}
		if c.downBox == nil {
			c.downBox = map[uint64]response{}
		}
		c.downBox[seq] = resp
		for {
			r, ok := c.downBox[c.downNext]
			if !ok {
				return
			}
			delete(c.downBox, c.downNext)
			c.downNext++
			if c.reset {
				return
			}
			c.w.post(c, func() { c.w.receive(c, r) })
		}
	})
}

// ---- faults -------------------------------------------------------------

func (s *sim) scheduleFault(k FaultKind) {
	rate := s.cfg.Faults.rate(k)
	if rate <= 0 {
		return
	}
	mean := time.Duration(float64(s.cfg.StaleAfter) / rate)
	s.after(s.expDur(mean), func() {
		if s.phase != phaseFaults {
			return
		}
		s.inject(k)
		s.scheduleFault(k)
	})
}

// pickWorker returns a random current worker instance in one of states.
func (s *sim) pickWorker(ok func(*worker) bool) *worker {
	var cands []*worker
	for _, w := range s.slots {
		if w != nil && ok(w) {
			cands = append(cands, w)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	return cands[s.rng.IntN(len(cands))]
}

func alive(w *worker) bool   { return w.state == wRunning || w.state == wPaused }
func running(w *worker) bool { return w.state == wRunning }

func (s *sim) inject(k FaultKind) {
	cfg := s.cfg
	if k != FaultWork {
		s.faultCount++
	}
	maxPause := cfg.Faults.MaxPause
	switch k {
	case FaultCrash:
		if w := s.pickWorker(alive); w != nil {
			s.res.Faults[k]++
			s.ownerDown(w)
			w.crash()
		}
	case FaultPause, FaultSuspend:
		if w := s.pickWorker(running); w != nil {
			s.res.Faults[k]++
			s.ownerDown(w)
			w.pause(s.logDur(time.Millisecond, maxPause), k == FaultSuspend)
		}
	case FaultPartition:
		if w := s.pickWorker(func(w *worker) bool { return alive(w) && !w.partitioned }); w != nil {
			s.res.Faults[k]++
			s.ownerDown(w)
			w.cutOff(s.logDur(10*time.Millisecond, maxPause), s.rng.IntN(5) < 2)
		}
	case FaultReset:
		if w := s.pickWorker(alive); w != nil {
			s.res.Faults[k]++
			w.resetConns(s.rng.IntN(2) == 0)
		}
	case FaultRestart:
		if !s.st.down {
			s.res.Faults[k]++
			s.st.restart(s.randDur(10*time.Millisecond, cfg.StaleAfter))
		}
	case FaultStall:
		if s.now >= s.st.stallUntil {
			s.res.Faults[k]++
			s.st.stallUntil = s.now + s.randDur(min(10*time.Millisecond, cfg.Faults.MaxStall), cfg.Faults.MaxStall)
			s.tracef("store: commits stall until %s", s.st.stallUntil)
		}
	case FaultStop:
		if w := s.pickWorker(running); w != nil && !w.stopping {
			s.res.Faults[k]++
			w.stop()
		}
	case FaultWork:
		s.res.Faults[k]++
		key := s.rng.IntN(cfg.Partitions)
		if cfg.Mutation&MutSegmentWork != 0 {
			var segs []int
			for _, r := range s.st.rows {
				if r.segment && r.visible() {
					segs = append(segs, r.key)
				}
			}
			if len(segs) > 0 && s.rng.IntN(2) == 0 {
				key = segs[s.rng.IntN(len(segs))]
			}
		}
		s.produce(key, int64(1+s.rng.IntN(3*cfg.BatchSize)))
	}
}

// ownerDown starts the takeover clock of every partition w owns that has
// work pending. If the partition's previous owner had failed too, the
// clock restarts: a latency measures one takeover.
func (s *sim) ownerDown(w *worker) {
	others := false
	for _, o := range s.slots {
		if o != nil && o != w && o.state == wRunning && o.registered && !o.stopping && !o.partitioned {
			others = true
		}
	}
	for _, r := range s.st.rows {
		if r.owner == w.id && r.available > r.position && r.visible() {
			if ls, ok := s.latStart[r.key]; !ok || ls.owner != w.id {
				s.latStart[r.key] = latencyStart{at: s.now, owner: w.id, faults: s.faultCount, others: others}
			}
		}
	}
}

// committed stops the takeover clock of key if another worker committed.
func (s *sim) committed(key, by int) {
	ls, ok := s.latStart[key]
	if !ok {
		return
	}
	delete(s.latStart, key)
	if by != ls.owner {
		s.res.TakeoverLatencies = append(s.res.TakeoverLatencies, s.now-ls.at)
		if ls.faults == s.faultCount && ls.others {
			s.res.CleanTakeoverLatencies = append(s.res.CleanTakeoverLatencies, s.now-ls.at)
		}
		s.tracef("takeover of p%d from w%d took %s", key, ls.owner, s.now-ls.at)
	}
}

func (s *sim) produce(key int, n int64) {
	s.st.internal(&request{kind: reqProduce, key: key, n: n}, func(resp response) {
		if resp.err != errNone && s.phase != phaseDone {
			s.after(s.cfg.Heartbeat/4, func() { s.produce(key, n) })
		}
	})
}

// operatorRetry re-enables quarantined and backing-off partitions, as an
// operator running `baton retry` would: rarely during the fault phase,
// every StaleAfter while draining.
func (s *sim) operatorRetry() {
	if s.phase == phaseDone {
		return
	}
	for _, r := range s.st.rows {
		if r.owner == 0 && (r.failed || r.attempts > 0) && (s.phase == phaseDrain || r.failed) && r.visible() {
			s.st.internal(&request{kind: reqRetry, key: r.key}, func(response) {})
		}
	}
	next := 5 * s.cfg.StaleAfter
	if s.phase == phaseDrain {
		next = s.cfg.StaleAfter
	}
	s.after(next, s.operatorRetry)
}

// ---- supervisor -----------------------------------------------------------

func (s *sim) startWorker(slot int) {
	if s.phase == phaseDone || s.slots[slot] != nil {
		return
	}
	w := newWorker(s, len(s.workers)+1, slot)
	s.workers = append(s.workers, w)
	s.slots[slot] = w
	s.res.Workers++
	w.start()
}

// exited is called when an instance has crashed or exited: a supervisor
// starts a new one in its slot after a while.
func (s *sim) exited(w *worker) {
	if s.slots[w.slot] == w {
		s.slots[w.slot] = nil
	}
	if s.phase == phaseDone {
		return
	}
	delay := s.randDur(s.cfg.StaleAfter/2, 3*s.cfg.StaleAfter)
	if s.phase == phaseDrain {
		delay = s.randDur(0, s.cfg.Heartbeat)
	}
	s.after(delay, func() { s.startWorker(w.slot) })
}

func (s *sim) byID(id int) *worker {
	if id < 1 || id > len(s.workers) {
		return nil
	}
	return s.workers[id-1]
}

// ---- drain and liveness ---------------------------------------------------

func (s *sim) startDrain() {
	s.phase = phaseDrain
	s.tracef("drain: faults off")
	for i, w := range s.slots {
		if w == nil {
			s.after(s.randDur(0, s.cfg.Heartbeat), func() { s.startWorker(i) })
		}
	}
	s.after(s.cfg.Heartbeat, s.checkDrained)
}

func (s *sim) allCaughtUp() bool {
	for _, r := range s.st.rows {
		if r.visible() && (r.position != r.available || r.failed) {
			return false
		}
	}
	return true
}

func (s *sim) checkDrained() {
	if s.phase != phaseDrain {
		return
	}
	if s.now-max(s.lastProgress, s.cfg.Duration) > s.cfg.Drain {
		s.finish() // no progress for too long: fails the liveness check
		return
	}
	if s.allCaughtUp() {
		if s.caughtUpAt == 0 {
			s.caughtUpAt = s.now
		}
		// Let anything still in flight land (late commits, releases)
		// before the final check.
		if s.now-s.caughtUpAt >= 2*s.cfg.StaleAfter {
			s.finish()
			return
		}
	} else {
		s.caughtUpAt = 0
	}
	s.after(s.cfg.Heartbeat, s.checkDrained)
}

// finish checks liveness and exactly-once over every partition: each of
// its items committed once, by its own row or by one of its segments.
func (s *sim) finish() {
	s.phase = phaseDone
	for _, r := range s.st.rows {
		if !r.visible() {
			continue
		}
		if r.logEnd != r.position {
			s.violate("exactly-once", r.key, "partition %d: output log ends at item %d but the checkpoint is %d", r.key, r.logEnd, r.position)
			return
		}
		if r.position != r.available || r.failed {
			s.violate("liveness", r.key, "partition %d not drained: no batch committed for %s, %s after faults stopped: %s",
				r.key, s.now-max(s.lastProgress, s.cfg.Duration), s.now-s.cfg.Duration, s.st.describe(r))
			return
		}
	}
	for _, r := range s.st.rows {
		if r.segment {
			continue
		}
		if want := []span{{0, r.available}}; r.available > 0 && !slices.Equal(r.done, want) || r.available == 0 && len(r.done) > 0 {
			s.violate("exactly-once", r.key, "partition %d: items committed %v (spans (from, to]), want all of 1..%d once", r.key, r.done, r.available)
			return
		}
		s.res.ItemsChecked += r.available
	}
	s.res.Drained = true
}
