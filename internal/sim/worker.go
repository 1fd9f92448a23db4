package sim

import (
	"github.com/batonhq/baton/internal/leaseinfo"
	"slices"
	"time"

	"github.com/batonhq/baton/internal/decide"
	"github.com/batonhq/baton/internal/taskstore"
)

type wstate uint8

const (
	wRunning wstate = iota
	wPaused
	wCrashed
	wExited
)

// wev is a step of a worker: a timer on its local clock (local) or the
// delivery of a message (conn set, or a notification).
type wev struct {
	fn    func()
	local bool
	due   time.Duration // local time, for timers
	conn  *conn
}

// worker is one worker instance: the distributor (claim loop, partition
// loops) and its heartbeat service, following distributor.go and
// heartbeat.go step by step. Goroutines become event-driven state
// machines; a Go select with several ready cases picks one at random.
type worker struct {
	s    *sim
	id   int // instance id, the owner written into rows
	slot int

	// staleSeen is Distributor.takeovers: when, by its clock, the worker
	// first saw each dead worker's partition (at a version) it left to
	// the others.
	staleSeen map[int]decide.StaleSighting[time.Duration]

	// Local monotonic clock: clockBase + (t − clockAt) × (1 + ppm/1e6),
	// frozen while suspended.
	ppm          int64
	clockBase    time.Duration
	clockAt      time.Duration
	frozen       bool
	suspendEpoch int

	state    wstate
	deferred []wev
	inResume bool
	pauseGen int

	partitioned bool
	partSlow    bool
	healAt      time.Duration
	partGen     int

	conns []*conn

	// busyUntil is when, by its clock, the worker's processor is done with
	// the processing queued for it (Config.ItemTime).
	busyUntil time.Duration

	// heartbeat.Service
	leases     map[int]*lease
	hbConn     *conn
	hbBusy     bool
	hbPending  bool
	hbStopped  bool
	hbRPC      *rpc
	hbNextTick time.Duration

	// Distributor
	held       map[int]*heldPart
	claiming   map[int]*claimRun // claims in flight with their first batch
	lostClaims map[int]lostClaim // candidates lost at their fence (distributor's skipLost)
	share      int
	shareIdle  bool // the share was computed when there was no work
	// othersBacklog and liveWorkers are the last load's backlog of all but
	// this worker's partitions and its live count (decide.BacklogShare).
	othersBacklog int64
	liveWorkers   int
	overflow      bool // work nobody else wants may be claimed beyond the share
	overflowSince time.Duration
	overflowOn    bool // overflowSince is set
	clWaiting     bool
	clTick        bool
	clWake        bool
	clDeferred    bool // the owed share recompute is due
	clRetry       bool // a failed round's back-off is over
	selGen        int  // the claim loop's iteration, for its timers
	roundErr      bool // the claim round in progress failed
	roundFailures int  // consecutive failed rounds
	workChanged   bool // work was added or retried: the share may be stale
	workerLeft    bool // a worker left: the share is stale, recompute at once
	clDone        bool
	registered    bool
	clRPC         *rpc
	pollNext      time.Duration
	lastRebalance time.Duration
	rebalanced    bool
	stopping      bool
	leaving       bool // marked stopped: held partitions are released
	abandoned     bool
	finalized     bool
}

func newWorker(s *sim, id, slot int) *worker {
	d := s.cfg.Drift
	ppm := int64((2*s.rng.Float64() - 1) * d * 1e6)
	return &worker{
		s: s, id: id, slot: slot, ppm: ppm,
		clockBase: time.Duration(s.rng.Int64N(int64(time.Hour))), clockAt: s.now,
		leases: map[int]*lease{}, held: map[int]*heldPart{}, claiming: map[int]*claimRun{}, lostClaims: map[int]lostClaim{},
	}
}

// ---- clock and steps ----------------------------------------------------

func (w *worker) localAt(t time.Duration) time.Duration {
	if w.frozen {
		return w.clockBase
	}
	d := int64(t - w.clockAt)
	return w.clockBase + time.Duration(d+d*w.ppm/1_000_000)
}

func (w *worker) local() time.Duration { return w.localAt(w.s.now) }

// toVirtual is the virtual time it takes w's clock to advance by d.
func (w *worker) toVirtual(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	v := int64(d) * 1_000_000 / (1_000_000 + w.ppm)
	for v+v*w.ppm/1_000_000 < int64(d) {
		v++
	}
	return time.Duration(v)
}

// after runs fn once w's clock has advanced by d.
func (w *worker) after(d time.Duration, fn func()) {
	w.schedLocal(wev{fn: fn, local: true, due: w.local() + d})
}

func (w *worker) schedLocal(ev wev) {
	w.s.after(w.toVirtual(ev.due-w.local()), func() { w.fire(ev) })
}

// post runs a message-driven step now (or when w resumes).
func (w *worker) post(c *conn, fn func()) { w.fire(wev{fn: fn, conn: c}) }

func (w *worker) fire(ev wev) {
	switch w.state {
	case wCrashed, wExited:
		return
	case wPaused:
		w.deferred = append(w.deferred, ev)
		return
	}
	if ev.local && w.local() < ev.due {
		w.schedLocal(ev) // the clock stood still meanwhile
		return
	}
	ev.fn()
}

func (w *worker) tracef(format string, args ...any) {
	if w.s.cfg.Trace {
		w.s.tracef("w%d: "+format, append([]any{w.id}, args...)...)
	}
}

// ---- faults ---------------------------------------------------------------

func (w *worker) pause(d time.Duration, suspend bool) {
	w.state = wPaused
	if suspend {
		w.clockBase = w.local()
		w.frozen = true
		w.suspendEpoch++
		w.tracef("suspended (clock stopped) for %s", d)
	} else {
		w.tracef("paused (SIGSTOP) for %s", d)
	}
	w.pauseGen++
	gen := w.pauseGen
	w.s.after(d, func() {
		if w.state == wPaused && w.pauseGen == gen {
			w.resume()
		}
	})
}

// resume runs every step that came due while w was frozen, in random
// order (which goroutine runs first after SIGCONT is up to the Go
// scheduler: a batch may issue its next statement before the timer that
// ends its lease has fired), keeping each connection's messages in order.
func (w *worker) resume() {
	s := w.s
	if w.frozen {
		w.frozen = false
		w.clockAt = s.now
	}
	w.state = wRunning
	w.tracef("resumed")
	evs := w.deferred
	w.deferred = nil
	perm := s.rng.Perm(len(evs))
	shuffled := make([]wev, len(evs))
	for i, p := range perm {
		shuffled[p] = evs[i]
	}
	// Restore each connection's delivery order over the positions its
	// messages landed on.
	byConn := map[*conn][]int{}
	for i, ev := range shuffled {
		if ev.conn != nil {
			byConn[ev.conn] = append(byConn[ev.conn], i)
		}
	}
	if len(byConn) > 0 {
		next := map[*conn]int{}
		for _, ev := range evs {
			if ev.conn != nil {
				pos := byConn[ev.conn][next[ev.conn]]
				next[ev.conn]++
				shuffled[pos] = ev
			}
		}
	}
	w.inResume = true
	for _, ev := range shuffled {
		if w.state != wRunning {
			w.deferred = append(w.deferred, ev)
			continue
		}
		if ev.local && w.local() < ev.due {
			w.schedLocal(ev)
			continue
		}
		ev.fn()
	}
	w.inResume = false
}

func (w *worker) crash() {
	w.tracef("crashed")
	w.state = wCrashed
	w.deferred = nil
	// The kernel closes the sockets of a dead process (FIN), unless the
	// whole machine went away.
	if w.s.rng.IntN(2) == 0 {
		w.closeAll()
	}
	w.s.exited(w)
}

func (w *worker) exit() {
	if w.state == wExited || w.state == wCrashed {
		return
	}
	w.tracef("exited")
	w.state = wExited
	w.deferred = nil
	w.closeAll()
	w.s.exited(w)
}

func (w *worker) closeAll() {
	for _, c := range slices.Clone(w.conns) {
		if !c.closed && !c.reset {
			c.closed = true
			w.s.sendUp(c, &request{kind: reqClose})
		}
	}
	w.conns = nil
}

func (w *worker) cutOff(d time.Duration, slow bool) {
	w.partitioned, w.partSlow = true, slow
	w.healAt = w.s.now + d
	w.partGen++
	gen := w.partGen
	if slow {
		w.tracef("network slowed for %s", d)
	} else {
		w.tracef("network cut for %s", d)
	}
	w.s.after(d, func() {
		if w.partGen != gen {
			return
		}
		w.partitioned = false
		w.tracef("network healed")
		// NAT or firewall state may be gone: connections with traffic
		// in flight are reset, whatever was held is lost.
		if !slow && w.s.rng.IntN(3) == 0 && w.state != wCrashed && w.state != wExited {
			w.resetConns(true)
		}
	})
}

// resetConns resets every open connection of w (RST). The client sees
// the error at once; the server notices now or, if serverNotices is
// false, only through its own timeouts.
func (w *worker) resetConns(serverNotices bool) {
	w.tracef("connections reset (server notices: %v)", serverNotices)
	st := w.s.st
	for _, c := range slices.Clone(w.conns) {
		if c.closed || c.reset {
			continue
		}
		c.reset = true
		c.broken = errNet
		if r := c.rpc; r != nil {
			w.s.after(0, func() { w.post(c, func() { r.finish(response{err: errNet}) }) })
		}
		if ss := c.sess; serverNotices && ss != nil && !ss.dead {
			if ss.cur != nil {
				ss.clientGone = true
			} else {
				st.kill(ss, errNone)
			}
		}
	}
	w.pruneConns()
}

func (w *worker) pruneConns() {
	w.conns = slices.DeleteFunc(w.conns, func(c *conn) bool { return c.closed || c.reset })
}

// ---- calls --------------------------------------------------------------

// rpc is one statement awaited by a worker, or a processing step (c nil).
type rpc struct {
	w    *worker
	c    *conn
	cb   func(response)
	done bool
	l    *lease // the call's context derives from this lease's
}

// call sends req over c and calls cb with the response, or with an error
// when the connection fails, timeout (w's clock) passes, or l ends.
func (w *worker) call(c *conn, req *request, timeout time.Duration, l *lease, cb func(response)) *rpc {
	r := &rpc{w: w, c: c, cb: cb, l: l}
	if l != nil {
		if l.ended {
			w.after(0, func() { r.finish(response{err: errCanceled}) })
			return r
		}
		l.watch = append(l.watch, r)
	}
	if c.broken != errNone || c.closed || c.reset {
		err := c.broken
		if err == errNone {
			err = errNet
		}
		c.broken = errNet
		w.after(0, func() { r.finish(response{err: err}) })
		return r
	}
	c.rpc = r
	w.s.sendUp(c, req)
	if timeout > 0 {
		w.after(timeout, func() { r.cancel(errTimeout) })
	}
	return r
}

// process is a processing step of d bound to lease l: at once, or with a
// fixed-rate processor (Config.ItemTime) once the steps queued before it
// are done.
func (w *worker) process(d time.Duration, l *lease, cb func(response)) *rpc {
	if w.s.cfg.ItemTime > 0 {
		now := w.local()
		w.busyUntil = max(w.busyUntil, now) + d
		d = w.busyUntil - now
	}
	return w.step(d, l, cb)
}

// workTime is how long processing n items takes (Config.ItemTime, or at
// random up to WorkTime), and sometimes, as a fault, up to StaleAfter.
func (s *sim) workTime(n int64) time.Duration {
	work := s.randDur(0, s.cfg.WorkTime)
	if s.cfg.ItemTime > 0 {
		work = time.Duration(n) * s.cfg.ItemTime
	}
	if s.rng.Float64() < s.cfg.Faults.LongBatch {
		work = s.randDur(s.cfg.IdleTxTimeout/2, s.cfg.StaleAfter)
	}
	return work
}

// batchItems is how many of limit items a batch processes: all of them,
// or, one batch in four, fewer (a processor may stop early), unless the
// processor runs at a fixed rate.
func (s *sim) batchItems(limit int64) int64 {
	if s.cfg.ItemTime == 0 && s.rng.IntN(4) == 0 {
		return 1 + s.rng.Int64N(limit)
	}
	return limit
}

// releasesCaughtUp is Distributor.releasesCaughtUp: in lock mode every
// caught-up partition is released, in leader mode segments only.
func (w *worker) releasesCaughtUp(key int) bool {
	return w.s.cfg.Mode == ModeLock || w.s.st.isSegment(key)
}

// step is a processing step of duration d bound to lease l.
func (w *worker) step(d time.Duration, l *lease, cb func(response)) *rpc {
	r := &rpc{w: w, cb: cb, l: l}
	if l.ended {
		w.after(0, func() { r.finish(response{err: errCanceled}) })
		return r
	}
	l.watch = append(l.watch, r)
	w.after(d, func() { r.finish(response{}) })
	return r
}

func (r *rpc) detach() {
	r.done = true
	if r.c != nil && r.c.rpc == r {
		r.c.rpc = nil
	}
	if r.l != nil {
		r.l.watch = slices.DeleteFunc(r.l.watch, func(o *rpc) bool { return o == r })
	}
}

func (r *rpc) finish(resp response) {
	if r.done {
		return
	}
	r.detach()
	r.cb(resp)
}

// cancel abandons the call: its connection is closed (the statement may
// still run on the server) and cb sees err.
func (r *rpc) cancel(err errKind) {
	if r.done {
		return
	}
	r.detach()
	if r.c != nil {
		r.w.closeConn(r.c)
	}
	r.w.after(0, func() { r.cb(response{err: err}) })
}

func (w *worker) closeConn(c *conn) {
	if c == nil || c.closed {
		return
	}
	c.closed = true
	if !c.reset && c.upSent > 0 {
		w.s.sendUp(c, &request{kind: reqClose})
	}
	w.pruneConns()
}

func (w *worker) receive(c *conn, resp response) {
	if c.closed {
		return
	}
	if resp.terminate {
		c.broken = resp.err
		if c.broken == errNone {
			c.broken = errNet
		}
	}
	if r := c.rpc; r != nil {
		if resp.terminate {
			c.broken = errNet
		}
		r.finish(resp)
	}
}

// poolCall runs one statement on a fresh pooled connection.
func (w *worker) poolCall(req *request, timeout time.Duration, l *lease, cb func(response)) *rpc {
	c := w.s.newConn(w)
	return w.call(c, req, timeout, l, func(resp response) {
		w.closeConn(c)
		cb(resp)
	})
}

// ---- leases (heartbeat.Service) -------------------------------------------

type lease struct {
	leaseID
	w          *worker
	ended      bool
	cause      string
	confirmed  bool
	streak     int
	deadline   time.Duration // local
	timerGen   int
	renewEpoch int  // suspendEpoch when the renewal behind deadline was sent
	work       bool // buffered Work() signal
	watch      []*rpc
	h          *heldPart
}

// end cancels the lease's context.
func (l *lease) end(cause string) {
	if l.ended {
		return
	}
	w := l.w
	l.ended, l.cause = true, cause
	l.timerGen++
	if cur := w.leases[l.key]; cur == l {
		delete(w.leases, l.key)
	}
	w.tracef("lease %s ends: %s", l.leaseID, cause)
	for _, r := range slices.Clone(l.watch) {
		r.cancel(errCanceled)
	}
	l.watch = nil
	if l.h != nil {
		l.h.kick()
	}
}

// track is Service.Track.
func (w *worker) track(id leaseID, sent time.Duration, epoch int, needConfirm bool) *lease {
	l := &lease{leaseID: id, w: w, confirmed: !needConfirm}
	if old := w.leases[id.key]; old != nil {
		old.end("ownership lost (re-tracked)")
	}
	w.leases[id.key] = l
	w.extend(l, sent, w.s.cfg.StaleAfter, epoch)
	return l
}

// extend is extendLocked: the local deadline becomes sent + remaining −
// margin.
func (w *worker) extend(l *lease, sent, remaining time.Duration, epoch int) {
	at := sent + decide.DeadlineIn(remaining, w.s.margin)
	l.deadline = at
	l.renewEpoch = epoch
	l.timerGen++
	if at <= w.local() {
		l.end("lease expired locally")
		return
	}
	gen := l.timerGen
	w.schedLocal(wev{local: true, due: at, fn: func() {
		if l.timerGen == gen && !l.ended {
			l.end("lease expired locally: no successful heartbeat in time")
		}
	}})
}

func (w *worker) renewed(l *lease, sent, remaining time.Duration, epoch int) {
	w.extend(l, sent, remaining, epoch)
	if l.ended {
		return
	}
	l.streak++
	if decide.Confirmed(l.streak, w.s.cfg.Confirm) && !l.confirmed {
		l.confirmed = true
		if l.h != nil {
			l.h.kick()
		}
	}
}

func (w *worker) trackedSorted() []*lease {
	keys := make([]int, 0, len(w.leases))
	for k := range w.leases {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]*lease, len(keys))
	for i, k := range keys {
		out[i] = w.leases[k]
	}
	return out
}

func (w *worker) hbTick() {
	if w.hbStopped {
		return
	}
	hb := w.s.cfg.Heartbeat
	now := w.local()
	for w.hbNextTick <= now {
		w.hbNextTick += hb
	}
	w.schedLocal(wev{local: true, due: w.hbNextTick, fn: w.hbTick})
	if w.hbBusy {
		w.hbPending = true
		return
	}
	w.beat()
}

// beat is Service.Beat: one batched renewal of every tracked lease.
func (w *worker) beat() {
	s := w.s
	w.hbBusy = true
	snapshot := w.trackedSorted()
	ids := make([]leaseID, len(snapshot))
	for i, l := range snapshot {
		ids[i] = l.leaseID
	}
	sent, epoch := w.local(), w.suspendEpoch
	timeout := max(s.cfg.Heartbeat, s.cfg.StaleAfter/4)
	if w.hbConn == nil {
		w.hbConn = s.newConn(w)
	}
	c := w.hbConn
	w.tracef("heartbeat of %d leases on conn %d", len(ids), c.id)
	want, _ := w.wanted()
	req := &request{kind: reqHeartbeat, owner: w.id, leases: ids, wanted: max(0, want),
		renewBelow: decide.RenewBelow(s.cfg.StaleAfter, s.cfg.Heartbeat, s.margin)}
	w.hbRPC = w.call(c, req, timeout, nil, func(resp response) {
		w.hbRPC = nil
		if w.hbStopped {
			return
		}
		if resp.err != errNone {
			w.tracef("heartbeat error %s on conn %d", resp.err, c.id)
			if resp.err.unknownOutcome() {
				// pinnedConn.do drops the connection; the outcome is
				// resolved by re-reading the leases over the pool.
				w.closeConn(c)
				if w.hbConn == c {
					w.hbConn = nil
				}
				sent2, epoch2 := w.local(), w.suspendEpoch
				w.hbRPC = w.poolCall(&request{kind: reqInspect, owner: w.id, leases: ids}, timeout, nil, func(r2 response) {
					w.hbRPC = nil
					if w.hbStopped {
						return
					}
					if r2.err == errNone {
						byKey := map[leaseID]time.Duration{}
						for _, h := range r2.held {
							byKey[h.leaseID] = h.remaining
						}
						for _, l := range snapshot {
							if l.ended {
								continue
							}
							if rem, ok := byKey[l.leaseID]; ok {
								w.renewed(l, sent2, rem, epoch2)
							} else {
								l.end("ownership lost: re-read found it owned by another claim")
							}
						}
						w.beatDone()
						return
					}
					w.beatFailed(snapshot)
				})
				return
			}
			w.beatFailed(snapshot)
			return
		}
		byKey := map[leaseID]renewal{}
		for _, r := range resp.renewals {
			byKey[r.leaseID] = r
		}
		for _, l := range snapshot {
			if l.ended {
				continue
			}
			r, ok := byKey[l.leaseID]
			if !ok {
				l.end("ownership lost: heartbeat found it owned by another claim")
				continue
			}
			// A fresh lease was checked, not rewritten: its deadline
			// follows what it has left.
			w.renewed(l, sent, decide.LeaseLeft(leaseinfo.Renewal{Fresh: r.fresh, Remaining: r.remaining}, s.cfg.StaleAfter), epoch)
			if r.available > r.position && !l.ended {
				l.work = true
				if l.h != nil {
					l.h.kick()
				}
			}
		}
		w.beatDone()
	})
}

func (w *worker) beatFailed(snapshot []*lease) {
	w.tracef("heartbeat failed (%d leases)", len(snapshot))
	for _, l := range snapshot {
		if !l.confirmed {
			l.streak = 0
		}
	}
	w.beatDone()
}

func (w *worker) beatDone() {
	w.hbBusy = false
	if w.hbPending && !w.hbStopped {
		w.hbPending = false
		w.beat()
	}
}

// ---- distributor: start, claim loop, stop ---------------------------------

func (w *worker) start() {
	s := w.s
	w.tracef("starting (clock drift %+dppm)", w.ppm)
	w.hbConn = s.newConn(w)
	c := w.hbConn
	// Register: one heartbeat with nothing held. If it fails, Start
	// returns the error and the process exits.
	w.call(c, &request{kind: reqHeartbeat, owner: w.id, renewBelow: decide.RenewBelow(s.cfg.StaleAfter, s.cfg.Heartbeat, s.margin)}, 0, nil, func(resp response) {
		if resp.err != errNone {
			w.tracef("registration failed: %s", resp.err)
			w.exit()
			return
		}
		w.registered = true
		now := w.local()
		w.hbNextTick = now + s.cfg.Heartbeat
		w.schedLocal(wev{local: true, due: w.hbNextTick, fn: w.hbTick})
		w.pollNext = now + s.cfg.PollInterval
		w.schedLocal(wev{local: true, due: w.pollNext, fn: w.pollTick})
		w.claimLoop()
	})
}

func (w *worker) pollTick() {
	if w.clDone {
		return
	}
	now := w.local()
	for w.pollNext <= now {
		w.pollNext += w.s.cfg.PollInterval
	}
	w.schedLocal(wev{local: true, due: w.pollNext, fn: w.pollTick})
	w.clTick = true
	w.claimPoll()
}

func (w *worker) wake() {
	w.clWake = true
	w.after(0, w.claimPoll)
}

func (w *worker) notified(kind notifyKind) {
	switch kind {
	case notifyLeft:
		w.workerLeft = true
	case notifyReleased:
	default:
		w.workChanged = true
	}
	w.wake()
	w.nudgeAll()
}

func (w *worker) nudgeAll() {
	for _, h := range w.heldSorted() {
		h.nudge = true
		h.kick()
	}
}

func (w *worker) heldSorted() []*heldPart {
	keys := make([]int, 0, len(w.held))
	for k := range w.held {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]*heldPart, len(keys))
	for i, k := range keys {
		out[i] = w.held[k]
	}
	return out
}

// claimPoll is the claim loop's select on the poll ticker and wakeClaim.
func (w *worker) claimPoll() {
	if !w.clWaiting {
		return
	}
	if w.stopping {
		w.clWaiting = false
		w.claimLoopDone()
		return
	}
	var ready []*bool
	if w.clTick {
		ready = append(ready, &w.clTick)
	}
	if w.clWake {
		ready = append(ready, &w.clWake)
	}
	if w.clDeferred {
		ready = append(ready, &w.clDeferred)
	}
	if w.clRetry {
		ready = append(ready, &w.clRetry)
	}
	if len(ready) == 0 {
		return
	}
	*ready[w.s.rng.IntN(len(ready))] = false
	w.clWaiting = false
	w.claimLoop()
}

// claimWait ends a claim round: a failed one is retried after a back-off
// (doubling per consecutive failure, at most the poll interval), and the
// loop waits for that, a poll, a wake-up or an owed recompute.
func (w *worker) claimWait() {
	w.clRPC = nil
	if w.stopping {
		w.claimLoopDone()
		return
	}
	if w.roundErr {
		cfg := w.s.cfg
		delay := decide.ClaimRetryDelay(cfg.Backoff, cfg.MaxBackoff, cfg.PollInterval, w.roundFailures)
		w.roundErr = false
		w.roundFailures++
		gen := w.selGen
		w.after(delay, func() {
			if w.selGen == gen {
				w.clRetry = true
				w.claimPoll()
			}
		})
	} else {
		w.roundFailures = 0
	}
	w.clWaiting = true
	w.claimPoll()
}

// claimLoop is one iteration of Distributor.claimLoop.
func (w *worker) claimLoop() {
	s := w.s
	if w.stopping {
		w.claimLoopDone()
		return
	}
	now := w.local()
	// The previous iteration's timers go with it.
	w.selGen++
	w.clDeferred, w.clRetry = false, false
	// After a notification, a worker with room recomputes its share now,
	// or, within a heartbeat of the last recompute, owes it and claims
	// nothing until it is due: the share in hand may be stale.
	recompute, owed := false, false
	if w.workerLeft && len(w.held)+len(w.claiming) < s.cfg.MaxPartitions {
		// A departure is recomputed at once, not rate-limited.
		recompute = true
		w.workerLeft, w.workChanged = false, false
	} else if w.workChanged && len(w.held)+len(w.claiming) < s.cfg.MaxPartitions {
		if wait := s.cfg.Heartbeat - (now - w.lastRebalance); wait > 0 && w.rebalanced {
			owed = true
			gen := w.selGen
			w.after(wait, func() {
				if w.selGen == gen {
					w.clDeferred = true
					w.claimPoll()
				}
			})
		} else {
			recompute = true
			w.workChanged = false
		}
	}
	next := func() {
		if owed {
			w.claimWait()
			return
		}
		w.claim()
	}
	if w.rebalanced && now-w.lastRebalance < w.rebalanceInterval() && !recompute {
		next()
		return
	}
	w.clRPC = w.poolCall(w.loadRequest(), 0, nil, func(resp response) {
		w.clRPC = nil
		if resp.err == errNone || w.stopping {
			w.lastRebalance, w.rebalanced = now, true
		}
		if resp.err == errNone {
			w.rebalance(resp.load)
		} else {
			w.roundErr = true
			if recompute {
				w.workChanged, owed = true, true // still owed: the retry recomputes
			}
		}
		next()
	})
}

// rebalanceInterval is Distributor.rebalanceInterval: a worker with room
// reads the load at least every StaleAfter/2.
func (w *worker) rebalanceInterval() time.Duration {
	cfg := w.s.cfg
	if w.overflowOn || len(w.held)+len(w.claiming) < cfg.MaxPartitions {
		return min(cfg.RebalanceInterval, cfg.StaleAfter/2)
	}
	return cfg.RebalanceInterval
}

// loadRequest is the distributor's FairShareLoad read.
func (w *worker) loadRequest() *request {
	return &request{kind: reqFairShareLoad, owner: w.id, maxPartitions: w.s.cfg.MaxPartitions}
}

// rebalance is Distributor.applyShare: the share from decide.PlanShare,
// hand-back of the newest surplus claims and of a leader's idle
// partitions, and work beyond the share once nobody else has wanted it
// for a lease's length.
func (w *worker) rebalance(load taskstore.Load) {
	cfg := w.s.cfg
	var keep []*heldPart
	idle := 0
	for _, h := range w.heldSorted() {
		if !h.handBack {
			keep = append(keep, h)
			if h.state == hpLeaderWait {
				idle++
			}
		}
	}
	// Its own backlog as it knows it (fresher than its last heartbeat).
	self := int64(0)
	for _, h := range keep {
		self += h.pending
	}
	load.Backlog += self - load.SelfBacklog
	load.SelfBacklog = self
	w.othersBacklog, w.liveWorkers = load.Backlog-self, load.LiveWorkers
	p := decide.PlanShare(load, len(keep), idle, cfg.Mode == ModeLeader, cfg.MaxPartitions)
	w.share = p.Share
	w.shareIdle = load.Busy == 0
	now := w.local()
	switch {
	case !p.Overflow:
		w.overflowOn = false
	case !w.overflowOn:
		w.overflowOn, w.overflowSince = true, now
	}
	w.overflow = w.overflowOn && decide.OverflowAllowed(p.Overflow, now-w.overflowSince, cfg.StaleAfter)
	handBack := func(h *heldPart) {
		h.handBack = true
		h.nudge = true
		h.kick()
	}
	if p.HandBack > 0 {
		decide.NewestDur(keep, func(h *heldPart) time.Duration { return h.claimedAt })
		for _, h := range keep[:p.HandBack] {
			handBack(h)
		}
		w.tracef("above fair share %d: handing back %d", p.Share, p.HandBack)
	}
	if p.HandBackIdle > 0 {
		n := 0
		for _, h := range keep {
			if n < p.HandBackIdle && h.state == hpLeaderWait {
				handBack(h)
				n++
			}
		}
		w.tracef("leader at capacity with %d unclaimed: handing back %d idle", load.Unclaimed, n)
	}
}

// claim is Distributor.claim: up to the share from the head of the
// claimable index, dead workers' partitions (stale candidates) first,
// within a share recomputed when it finds them, and beyond it, up to
// MaxPartitions, those it has seen waiting for SpreadTakeovers.
func (w *worker) claim() {
	if w.stopping {
		w.claimLoopDone()
		return
	}
	want, room := w.wanted()
	if room <= 0 {
		w.claimWait()
		return
	}
	// A dead worker's partitions first (stale candidates), then, when
	// the share wants more and they do not fill the room, the head of the
	// claimable index.
	idle := w.shareIdle
	w.clRPC = w.poolCall(&request{kind: reqStaleCandidates, limit: decide.StaleReadLimit(room)}, 0, nil, func(resp response) {
		if resp.err != errNone {
			w.roundErr = true
			w.claimWait()
			return
		}
		stale := resp.cands
		if len(stale) > 0 && w.s.cfg.SpreadTakeovers >= 0 {
			// Distributor.spreadShare: the share recomputed with them.
			w.recomputeShare(func(want, room int) { w.claimStale(stale, want, room, false) })
			return
		}
		w.claimStale(stale, want, room, idle)
	})
}

// claimStale is the rest of Distributor.claim once the stale candidates
// are read (and the share recomputed for them): the head of the claimable
// index too when the share wants more and they do not fill the room.
func (w *worker) claimStale(stale []candidate, want, room int, idle bool) {
	if !decide.ReadHead(want, len(stale), room) {
		w.claimCands(stale, want, room, idle)
		return
	}
	inFlight := len(w.claiming) + len(w.lostClaims)
	w.clRPC = w.poolCall(&request{kind: reqCandidates, limit: decide.HeadReadLimit(want, inFlight, w.s.cfg.MaxPartitions)}, 0, nil, func(resp response) {
		if resp.err != errNone {
			w.roundErr = true
			w.claimWait()
			return
		}
		seen := map[int]bool{}
		for _, c := range stale {
			seen[c.key] = true
		}
		cands := stale
		for _, c := range resp.cands {
			if !seen[c.key] {
				cands = append(cands, c)
			}
		}
		w.claimCands(cands, want, room, idle)
	})
}

// claimCands is the rest of Distributor.claim once candidates are read.
func (w *worker) claimCands(cands []candidate, want, room int, idle bool) {
	s := w.s
	if len(cands) == 0 {
		w.claimWait()
		return
	}
	// Candidates this worker is claiming with their first batch still
	// read as claimable: left alone.
	cands = slices.DeleteFunc(cands, func(c candidate) bool { return w.claiming[c.key] != nil })
	cands = w.skipLost(cands)
	round := func() {
		s.rng.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
		decide.StaleFirst(cands, candOwned)
		w.claimRound(0, cands, want, room, w.beyondShare(cands))
	}
	if !idle || want <= 0 {
		round()
		return
	}
	// The share was computed with no work in sight: recompute it before
	// claiming.
	w.recomputeShare(func(newWant, newRoom int) {
		want, room = newWant, newRoom
		round()
	})
}

// recomputeShare reads the load and applies it (rebalance), then goes on
// with the share's want and room, or waits for the next round when it
// leaves no room.
func (w *worker) recomputeShare(next func(want, room int)) {
	w.clRPC = w.poolCall(w.loadRequest(), 0, nil, func(resp response) {
		if resp.err != errNone {
			w.roundErr = true
			w.claimWait()
			return
		}
		w.rebalance(resp.load)
		want, room := w.wanted()
		if room <= 0 {
			w.claimWait()
			return
		}
		next(want, room)
	})
}

func candOwned(c candidate) bool { return c.owned }

// wanted is Distributor.wanted (decide.Wanted): how many more
// partitions the share allows, and MaxPartitions; none while handing
// back.
func (w *worker) wanted() (want, room int) {
	handingBack := false
	held, self := 0, int64(0)
	for _, h := range w.held {
		handingBack = handingBack || h.handBack
		if !h.handBack {
			held++
			self += h.pending
		}
	}
	share := decide.BacklogShare(w.share, held, self, w.othersBacklog, w.liveWorkers)
	return decide.Wanted(share, w.s.cfg.MaxPartitions, len(w.held)+len(w.claiming), w.overflow, handingBack)
}

// beyondShare is takeoverWait.beyondShare: the stale candidates the
// worker takes whatever its share, those it has seen waiting for
// SpreadTakeovers.
func (w *worker) beyondShare(cands []candidate) map[int]bool {
	var keys []int
	var versions []int64
	for _, c := range cands {
		if c.owned {
			keys, versions = append(keys, c.key), append(versions, c.version)
		}
	}
	now := w.local()
	var beyond map[int]bool
	w.staleSeen, beyond, _ = decide.SightStale(w.staleSeen, keys, versions, now,
		func(at time.Duration) time.Duration { return now - at }, w.s.cfg.SpreadTakeovers)
	return beyond
}

func (w *worker) claimRound(round int, cands []candidate, want, room int, beyond map[int]bool) {
	if round >= 2 || room <= 0 || len(cands) == 0 || w.stopping {
		w.claimWait()
		return
	}
	try, rest := decide.PickClaims(cands, func(c candidate) bool { return c.owned && beyond[c.key] }, want, room)
	if w.s.cfg.ClaimWithBatch {
		// Unowned candidates are claimed each with its first batch;
		// takeovers together, to be confirmed.
		try = slices.DeleteFunc(try, func(c candidate) bool {
			if c.owned {
				return false
			}
			w.startClaimRun(c)
			want--
			room--
			return true
		})
	}
	if len(try) == 0 {
		w.claimWait()
		return
	}
	sent, epoch := w.local(), w.suspendEpoch
	w.clRPC = w.poolCall(&request{kind: reqClaim, owner: w.id, cands: try}, 0, nil, func(resp response) {
		won := func(cs []claimed) {
			for _, c := range cs {
				w.tracef("claimed %s (takeover=%v)", c.leaseID, c.takeover)
				w.startPartition(c, sent, epoch)
				if !c.takeover || !beyond[c.key] {
					want--
				}
				room--
			}
			w.claimRound(round+1, rest, want, room, beyond)
		}
		switch {
		case resp.err == errNone:
			won(resp.won)
		case !resp.err.unknownOutcome() || w.stopping:
			w.roundErr = true
			w.claimWait()
		default:
			w.resolveClaims(try, won)
		}
	})
}

// resolveClaims is Distributor.resolveClaims: a claim whose outcome is
// unknown may have applied; the candidates now at the next version under
// this worker were won, and are adopted.
func (w *worker) resolveClaims(try []candidate, won func([]claimed)) {
	next := make([]leaseID, len(try))
	owned := map[int]bool{}
	for i, c := range try {
		next[i] = leaseID{c.key, c.version + 1}
		owned[c.key] = c.owned
	}
	w.clRPC = w.poolCall(&request{kind: reqInspect, owner: w.id, leases: next}, w.s.cfg.StaleAfter/2, nil, func(resp response) {
		if resp.err != errNone {
			w.roundErr = true
			w.claimWait()
			return
		}
		adopted := make([]claimed, len(resp.held))
		for i, h := range resp.held {
			adopted[i] = claimed{leaseID: h.leaseID, takeover: owned[h.key]}
		}
		w.tracef("claim outcome unknown (%d candidates): re-read adopts %d", len(try), len(adopted))
		won(adopted)
	})
}

func (w *worker) stop() {
	w.tracef("graceful stop")
	w.stopping = true
	if r := w.clRPC; r != nil {
		r.cancel(errCanceled)
	}
	w.after(0, w.claimPoll)
}

// claimLoopDone continues Distributor.finish once the claim loop is done:
// the worker marks itself stopped, so that the workers its releases wake
// no longer count it, and only then hands its partitions back.
func (w *worker) claimLoopDone() {
	if w.clDone {
		return
	}
	w.clDone = true
	w.poolCall(&request{kind: reqStopWorker, owner: w.id}, w.s.cfg.StaleAfter/2, nil, func(response) { w.leave() })
}

func (w *worker) leave() {
	w.leaving = true
	w.nudgeAll()
	if len(w.held) == 0 && len(w.claiming) == 0 {
		w.finalize()
		return
	}
	w.after(w.s.cfg.ShutdownTimeout, func() {
		if w.finalized {
			return
		}
		w.tracef("shutdown timeout: abandoning batches in flight")
		w.abandoned = true
		for _, h := range w.heldSorted() {
			if b := h.batch; b != nil && b.rpc != nil {
				b.rpc.cancel(errAbandoned)
			}
		}
		for _, k := range sortedKeys(w.claiming) {
			if cr := w.claiming[k]; cr.rpc != nil {
				cr.rpc.cancel(errAbandoned)
			}
		}
	})
}

func (w *worker) checkStopped() {
	if w.leaving && len(w.held) == 0 && len(w.claiming) == 0 && !w.finalized {
		w.finalize()
	}
}

func (w *worker) finalize() {
	w.finalized = true
	w.hbStopped = true
	if r := w.hbRPC; r != nil {
		r.cancel(errCanceled)
	}
	w.closeConn(w.hbConn)
	w.hbConn = nil
	w.exit()
}

// ---- partition loop ---------------------------------------------------------

type hpState uint8

const (
	hpStarting hpState = iota
	hpConfirm
	hpBatch
	hpRetryWait
	hpLeaderWait
	hpEnding
	hpDone
)

// heldPart is a held partition and its runPartition goroutine.
type heldPart struct {
	w         *worker
	l         *lease
	takeover  bool
	claimedAt time.Duration
	handBack  bool
	nudge     bool
	state     hpState
	transient int
	retryGen  int
	retryDue  bool
	batch     *batchRun
	failWith  errKind // a first batch failed in the claim's transaction: record it first
	pending   int64   // items pending as of the claim or the last commit
}

func (w *worker) startPartition(c claimed, sent time.Duration, epoch int) {
	h := &heldPart{w: w, takeover: c.takeover, claimedAt: sent, pending: max(0, c.available-c.position)}
	h.l = w.track(c.leaseID, sent, epoch, c.takeover)
	h.l.h = h
	w.held[c.key] = h
	// Its backlog was counted as claimable in the last load: it is this
	// worker's now.
	w.othersBacklog = max(0, w.othersBacklog-h.pending)
	w.after(0, h.begin)
}

func (h *heldPart) begin() {
	if h.failWith != errNone {
		h.fail(h.failWith)
		return
	}
	if h.takeover {
		h.state = hpConfirm
		h.poll()
		return
	}
	h.top()
}

func (h *heldPart) kick() {
	switch h.state {
	case hpConfirm, hpRetryWait, hpLeaderWait:
		h.w.after(0, h.poll)
	}
}

// poll is the select of whichever wait the loop is in.
func (h *heldPart) poll() {
	w := h.w
	s := w.s
	l := h.l
	switch h.state {
	case hpConfirm:
		var ready []int
		if l.confirmed {
			ready = append(ready, 0)
		}
		if l.ended {
			ready = append(ready, 1)
		}
		if w.leaving {
			ready = append(ready, 2)
		}
		if len(ready) == 0 {
			return
		}
		switch ready[s.rng.IntN(len(ready))] {
		case 0:
			w.tracef("claim %s confirmed", l.leaseID)
			h.top()
		case 1:
			h.lost()
		case 2:
			h.release("shutdown")
		}
	case hpRetryWait:
		if l.ended || w.leaving || h.retryDue {
			h.top()
		}
	case hpLeaderWait:
		var ready []*bool
		if l.work {
			ready = append(ready, &l.work)
		}
		if h.nudge {
			ready = append(ready, &h.nudge)
		}
		if len(ready) == 0 && !l.ended && !w.leaving {
			return
		}
		if len(ready) > 0 && !l.ended && !w.leaving {
			*ready[s.rng.IntN(len(ready))] = false
		}
		h.top()
	}
}

// top is the head of runPartition's loop.
func (h *heldPart) top() {
	w := h.w
	switch {
	case h.l.ended:
		h.lost()
	case w.leaving:
		h.release("shutdown")
	case h.handBack:
		h.release("rebalance")
	default:
		h.state = hpBatch
		h.runBatch()
	}
}

func (h *heldPart) afterBatch(items int64, caughtUp bool, err errKind) {
	w := h.w
	s := w.s
	switch {
	case err == errNone:
		h.transient = 0
	case err == errFenced:
		h.l.end("released (fenced)")
		s.res.Fenced++
		w.tracef("commit of %s rejected by the fence", h.l.leaseID)
		h.exit()
		return
	case h.l.ended:
		h.lost()
		return
	case err == errAbandoned:
		h.release("shutdown")
		return
	case err.transient() && decide.RetryTransient(h.transient, s.cfg.MaxAttempts):
		h.transient++
		w.tracef("batch of %s failed (%s), retrying", h.l.leaseID, err)
		h.state = hpRetryWait
		h.retryGen++
		h.retryDue = false
		gen := h.retryGen
		w.after(s.cfg.Heartbeat, func() {
			if h.retryGen == gen {
				h.retryDue = true
				h.poll()
			}
		})
		h.poll()
		return
	default:
		h.fail(err)
		return
	}
	if items > 0 || !caughtUp {
		h.top()
		return
	}
	if w.releasesCaughtUp(h.l.key) {
		h.release("caught_up")
		return
	}
	h.state = hpLeaderWait
	h.poll()
}

func (h *heldPart) lost() {
	h.w.tracef("lost %s: %s", h.l.leaseID, h.l.cause)
	h.l.end("released")
	h.w.s.res.Lost++
	h.exit()
}

func (h *heldPart) release(reason string) {
	w := h.w
	h.state = hpEnding
	h.l.end("released")
	w.tracef("releasing %s (%s)", h.l.leaseID, reason)
	w.poolCall(&request{kind: reqRelease, owner: w.id, lease: h.l.leaseID}, w.s.cfg.StaleAfter/2, nil, func(response) {
		h.exit()
	})
}

func (h *heldPart) fail(err errKind) {
	w := h.w
	if w.s.res.FailureCauses == nil {
		w.s.res.FailureCauses = map[string]int{}
	}
	w.s.res.FailureCauses[err.String()]++
	h.state = hpEnding
	h.l.end("released (failed)")
	w.tracef("batch of %s failed (%s): recording the failure", h.l.leaseID, err)
	w.poolCall(&request{kind: reqFail, owner: w.id, lease: h.l.leaseID, attempts: w.s.cfg.MaxAttempts}, w.s.cfg.StaleAfter/2, nil, func(response) {
		h.exit()
	})
}

func (h *heldPart) exit() {
	w := h.w
	h.state = hpDone
	if cur, ok := w.held[h.l.key]; ok && cur == h {
		delete(w.held, h.l.key)
	}
	w.wake()
	if w.stopping {
		w.checkStopped()
	}
}

// ---- a batch ----------------------------------------------------------------

// batchRun is Distributor.batch: one fenced transaction.
type batchRun struct {
	h       *heldPart
	c       *conn
	rpc     *rpc // the step in progress, if bound to the batch's context
	readPos int64
	avail   int64
	newPos  int64
	split   []segSpan // the batch splits the partition instead (Distributor.split)
}

func (h *heldPart) runBatch() {
	w := h.w
	s := w.s
	l := h.l
	b := &batchRun{h: h}
	h.batch = b
	b.c = s.newConn(w)
	b.call(&request{kind: reqBeginFence, owner: w.id, lease: l.leaseID}, func(resp response) {
		if resp.err != errNone {
			b.finish(0, false, resp.err)
			return
		}
		if resp.position >= resp.available {
			b.finish(0, true, errNone)
			return
		}
		b.readPos, b.avail = resp.position, resp.available
		limit := min(int64(s.cfg.BatchSize), b.avail-b.readPos)
		// A split, when the partition has enough pending, asks the
		// processor for split points (costing what a batch does) and
		// writes the segments instead of processing.
		b.split = w.splitPoints(l.key, b.readPos, b.avail)
		n := limit
		if b.split == nil {
			n = s.batchItems(limit)
		}
		b.newPos = b.readPos + n
		if b.split != nil {
			b.newPos = b.avail
		}
		work := s.workTime(n)
		procErr := s.rng.Float64() < s.cfg.Faults.ProcessorError
		b.rpc = w.process(work, l, func(r response) {
			b.rpc = nil
			switch {
			case r.err != errNone:
				b.finish(0, false, r.err)
			case procErr:
				s.res.Faults[FaultProcessorError]++
				b.finish(0, false, errProcessor)
			case b.split != nil:
				b.writeSplit()
			default:
				b.write()
			}
		})
	})
}

// call sends a statement of the batch's transaction, under the lease's
// context.
func (b *batchRun) call(req *request, cb func(response)) {
	w := b.h.w
	b.rpc = w.call(b.c, req, 0, b.h.l, func(resp response) {
		b.rpc = nil
		cb(resp)
	})
}

// ctxErr is the batch context's error: the lease's, or abandonment.
func (b *batchRun) ctxErr() errKind {
	if b.h.l.ended {
		return errCanceled
	}
	if b.h.w.abandoned {
		return errAbandoned
	}
	return errNone
}

func (b *batchRun) write() {
	if err := b.ctxErr(); err != errNone {
		b.finish(0, false, err)
		return
	}
	b.h.w.checkWrite(b.h.l, "a write")
	b.call(&request{kind: reqWrite, from: b.readPos + 1, to: b.newPos}, func(resp response) {
		if resp.err != errNone {
			b.finish(0, false, resp.err)
			return
		}
		b.advance()
	})
}

// splitPoints is Distributor.split's choice with the pricer's rule
// (pricer.Processor.Split): nothing unless the processor is a Splitter,
// the partition is not a segment and more than 2 × SegmentRecords items
// are pending; then segments from position to available starting at
// SplitChunk boundaries, each at least SegmentRecords after the previous
// start and leaving at least SegmentRecords/2 for the last. Nil when no
// boundary qualifies: the batch processes as usual.
func (w *worker) splitPoints(key int, position, available int64) []segSpan {
	cfg := w.s.cfg
	size := cfg.SegmentRecords
	if size <= 0 || w.s.st.isSegment(key) || available-position <= 2*size {
		return nil
	}
	var segs []segSpan
	start := position
	for p := (position + size + cfg.SplitChunk - 1) / cfg.SplitChunk * cfg.SplitChunk; p < available && available-p >= size/2; {
		segs = append(segs, segSpan{start, p})
		start = p
		p = (p + size + cfg.SplitChunk - 1) / cfg.SplitChunk * cfg.SplitChunk
	}
	if len(segs) == 0 {
		return nil
	}
	return append(segs, segSpan{start, available})
}

// writeSplit writes the segments (taskstore.Store.Split), then moves the
// checkpoint to available as a batch does.
func (b *batchRun) writeSplit() {
	if err := b.ctxErr(); err != errNone {
		b.finish(0, false, err)
		return
	}
	b.h.w.checkWrite(b.h.l, "the split")
	b.call(&request{kind: reqSplit, segs: b.split}, func(resp response) {
		switch resp.err {
		case errNone:
			b.advance()
		case errUnique:
			b.movedOr(resp.err)
		default:
			b.finish(0, false, resp.err)
		}
	})
}

// movedOr is Distributor.movedOr for a split that failed on a segment's
// primary key: a late commit of an earlier attempt of this claim has split
// the same items, so the checkpoint moved (transient), which a re-read
// shows; otherwise the error stands.
func (b *batchRun) movedOr(err errKind) {
	w := b.h.w
	l := b.h.l
	w.poolCall(&request{kind: reqProgress, key: l.key}, w.s.cfg.StaleAfter/2, nil, func(resp response) {
		if resp.err == errNone && resp.version == l.version && resp.position != b.readPos {
			w.tracef("split of %s failed (%s): the checkpoint moved to %d under this claim", l.leaseID, err, resp.position)
			err = errCheckpointMoved
		}
		b.finish(0, false, err)
	})
}

func (b *batchRun) advance() {
	if err := b.ctxErr(); err != errNone {
		b.finish(0, false, err)
		return
	}
	b.h.w.checkWrite(b.h.l, "the checkpoint update")
	b.call(&request{kind: reqAdvance, newPos: b.newPos}, func(resp response) {
		if resp.err != errNone {
			b.finish(0, false, resp.err)
			return
		}
		b.commit()
	})
}

func (b *batchRun) commit() {
	if err := b.ctxErr(); err != errNone {
		b.finish(0, false, err)
		return
	}
	b.h.w.checkWrite(b.h.l, "the commit")
	b.call(&request{kind: reqCommit}, func(resp response) {
		if resp.err == errNone {
			b.finish(b.items(), b.newPos >= b.avail, errNone)
			return
		}
		if b.ctxErr() != errNone || !resp.err.unknownOutcome() {
			b.finish(0, false, resp.err)
			return
		}
		b.resolve(resp.err)
	})
}

// resolve is resolveCommit: re-read the checkpoint (three attempts within
// StaleAfter/2, Heartbeat/4 apart) to learn whether a commit whose outcome
// is unknown applied.
func (b *batchRun) resolve(commitErr errKind) {
	w := b.h.w
	s := w.s
	l := b.h.l
	deadline := w.local() + s.cfg.StaleAfter/2
	attempt := 0
	var try func()
	try = func() {
		left := deadline - w.local()
		if left <= 0 {
			b.finish(0, false, commitErr)
			return
		}
		w.poolCall(&request{kind: reqProgress, key: l.key}, left, nil, func(resp response) {
			if resp.err == errNone {
				if resp.version == l.version && resp.position == b.newPos {
					s.res.ResolvedCommits++
					w.tracef("commit of %s had an unknown outcome; re-read shows it applied", l.leaseID)
					b.finish(b.items(), b.newPos >= b.avail, errNone)
					return
				}
				w.tracef("commit of %s had an unknown outcome; re-read finds v%d position %d: not applied", l.leaseID, resp.version, resp.position)
				b.finish(0, false, commitErr)
				return
			}
			attempt++
			if attempt >= 3 || deadline-w.local() <= s.cfg.Heartbeat/4 {
				b.finish(0, false, commitErr)
				return
			}
			w.after(s.cfg.Heartbeat/4, try)
		})
	}
	try()
}

// items is how many items the batch committed: none for a split.
func (b *batchRun) items() int64 {
	if b.split != nil {
		return 0
	}
	return b.newPos - b.readPos
}

func (b *batchRun) finish(items int64, caughtUp bool, err errKind) {
	h := b.h
	w := h.w
	// The deferred tx.Rollback (or the pool's discard of the connection
	// after a cancellation): the session ends, aborting what was not
	// committed.
	w.closeConn(b.c)
	h.batch = nil
	if err == errNone {
		h.pending = max(0, b.avail-b.newPos)
	}
	w.after(0, func() { h.afterBatch(items, caughtUp, err) })
}

// checkWrite is invariant 4: no write after the lease's local deadline. A
// worker resuming from a pause may issue one statement before its
// deadline timer runs (Go gives no order between them); that is counted,
// not a violation — the fence and the idle timeout make it harmless.
func (w *worker) checkWrite(l *lease, what string) {
	s := w.s
	if s.now <= w.clockAt || w.localAt(s.now-1) < l.deadline {
		return
	}
	if w.inResume || l.renewEpoch != w.suspendEpoch {
		s.res.LateWrites++
		w.tracef("late write for %s right after resuming", l.leaseID)
		return
	}
	s.violate("local deadline", l.key, "w%d issued %s for %s at local time %s, %s after its local deadline %s (lease ended: %v)",
		w.id, what, l.leaseID, w.local(), w.local()-l.deadline, l.deadline, l.ended)
}

// checkTakeover is the other half of invariant 4: when a claim takes a
// row over from an owner that is still alive, that owner's local deadline
// for the lease must already have passed by its own clock — unless its
// clock stopped (suspend) since the renewal the deadline came from, which
// no margin can cover.
func (s *sim) checkTakeover(r *row, by int, at time.Duration) {
	w := s.byID(r.owner)
	if w == nil || w.state == wCrashed || w.state == wExited {
		return
	}
	l := w.leases[r.key]
	if l == nil || l.version != r.version || l.ended || l.renewEpoch != w.suspendEpoch || at < w.clockAt {
		return
	}
	if local := w.localAt(at); local < l.deadline {
		s.violate("local deadline", r.key, "partition %d taken over by w%d while its owner w%d (clock %+dppm, margin %s) still had %s of local lease on v%d",
			r.key, by, w.id, w.ppm, s.margin, l.deadline-local, r.version)
	}
}
