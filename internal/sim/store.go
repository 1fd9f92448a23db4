package sim

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/batonhq/baton/internal/decide"
	"github.com/batonhq/baton/internal/taskstore"
)

// Sentinels for lease_expires_at.
const (
	negInf = time.Duration(math.MinInt64)
	posInf = time.Duration(math.MaxInt64)
)

// errKind is what a client sees as a statement's outcome. It mirrors how
// the real code classifies errors (package internal/dberr): unknownOutcome
// is dberr.UnknownOutcome ("not a server error") and transient is
// dberr.Transient.
type errKind uint8

const (
	errNone            errKind = iota
	errNet                     // connection lost, reset, refused, EOF
	errTimeout                 // client-side context deadline
	errCanceled                // the lease's (or the claim loop's) context was cancelled
	errAbandoned               // batch abandoned at the end of the shutdown timeout
	errFenced                  // the fence (or the checkpoint update) found no current claim
	errLockTimeout             // SQLSTATE 55P03
	errStmtTimeout             // SQLSTATE 57014
	errShutdown                // SQLSTATE 57P01: terminated by a server restart
	errIdleTimeout             // SQLSTATE 25P03: idle-in-transaction timeout (FATAL)
	errTxAborted               // SQLSTATE 25P02: statement in an aborted transaction
	errProcessor               // the processor failed
	errCheckpointMoved         // AdvanceCAS: the checkpoint moved since the fence read it
	errClaimLost               // a claim with its first batch lost its candidate (taskstore.ErrClaimLost)
	errClaimBusy               // its compare-and-set found the fenced row locked (distributor's errClaimBusy)
	errUnique                  // SQLSTATE 23505: a split's segment row exists already
	errNotFound                // the row is gone (partition.ErrNotFound)
)

var errNames = []string{"ok", "net", "timeout", "canceled", "abandoned", "fenced", "lock-timeout", "statement-timeout",
	"shutdown", "idle-timeout", "tx-aborted", "processor", "checkpoint-moved", "claim-lost", "claim-busy",
	"unique-violation", "not-found"}

func (e errKind) String() string { return errNames[e] }

// unknownOutcome: the error is not one reported by the server, so the
// statement may or may not have applied.
func (e errKind) unknownOutcome() bool {
	return e == errNet || e == errTimeout || e == errCanceled || e == errAbandoned
}

// transient mirrors dberr.Transient.
func (e errKind) transient() bool {
	switch e {
	case errNet, errTimeout, errLockTimeout, errStmtTimeout, errShutdown, errCheckpointMoved:
		return true
	}
	return false
}

type lockMode uint8

const (
	lockKeyShare    lockMode = 1 << iota // FOR KEY SHARE (the fence)
	lockShare                            // FOR SHARE
	lockNoKeyUpdate                      // FOR NO KEY UPDATE (heartbeat, UPDATE of non-key columns)
	lockUpdate                           // FOR UPDATE (claim, release, fail, retry)
)

// conflicts is PostgreSQL's row-lock conflict table.
func conflicts(held, want lockMode) bool {
	switch want {
	case lockKeyShare:
		return held&lockUpdate != 0
	case lockShare:
		return held&(lockNoKeyUpdate|lockUpdate) != 0
	case lockNoKeyUpdate:
		return held&(lockShare|lockNoKeyUpdate|lockUpdate) != 0
	default:
		return held != 0
	}
}

type leaseID struct {
	key     int
	version int64
}

func (l leaseID) String() string { return fmt.Sprintf("p%d@v%d", l.key, l.version) }

type candidate struct {
	leaseID
	owned bool
}

type claimed struct {
	leaseID
	takeover            bool
	position, available int64
}

type renewal struct {
	leaseID
	available, position int64
	// fresh: checked, not rewritten (more than renewBelow left); remaining
	// is then what it has left.
	fresh     bool
	remaining time.Duration
	paused    bool // the partition is paused (pausedRow)
}

type heldLease struct {
	leaseID
	remaining time.Duration
}

type reqKind uint8

const (
	reqHeartbeat reqKind = iota
	reqInspect
	reqCandidates
	reqStaleCandidates
	reqClaim
	reqRelease
	reqFail
	reqProgress
	reqFairShareLoad
	reqQuarantinedCount
	reqPendingWork
	reqSegmentsHeldByOthers
	reqStopWorker
	reqBeginFence
	reqWrite
	reqAdvance
	reqCommit
	reqClose
	reqProduce
	reqRetry
	reqFenceUnowned
	reqClaimAdvance
	reqSplit
	reqRewind
)

var reqNames = []string{"heartbeat", "inspect", "candidates", "stale-candidates", "claim", "release", "fail", "progress", "fair-share-load",
	"quarantined-count", "pending-work", "stop-worker", "begin+fence", "write", "advance", "commit", "close", "produce", "retry",
	"begin+fence-unowned", "claim+advance", "split", "rewind"}

func (k reqKind) String() string { return reqNames[k] }

type request struct {
	kind     reqKind
	owner    int // sender's instance id
	lease    leaseID
	leases   []leaseID
	cands    []candidate
	from, to int64 // items written
	newPos   int64
	limit    int
	key      int
	n        int64
	attempts int // Fail: max attempts
	cand     candidate
	release  bool // ClaimAdvance: release in the same statement
	// Heartbeat: leases with less than renewBelow left are rewritten; how
	// many more partitions the worker wants (taskstore.Worker.Wanted).
	renewBelow time.Duration
	wanted     int
	// FairShareLoad: the reader's room (maxPartitions).
	maxPartitions int
	// Split: the segments, in order.
	segs []segSpan
	// SegmentsHeldByOthers: the partitions whose segments count.
	keys []int
}

// segSpan is a segment's items (start, end] of its partition
// (taskstore.Segment).
type segSpan struct{ start, end int64 }

type response struct {
	err       errKind
	terminate bool // the server ended the session
	position  int64
	available int64
	version   int64
	renewals  []renewal
	held      []heldLease
	cands     []candidate
	won       []claimed
	released  bool // Release, Fail: the lease was current; Retry: the row changed
	load      taskstore.Load
	count     int   // QuarantinedCount
	items     int64 // SegmentsHeldByOthers
	// Fail: what the failure did.
	attempts    int
	quarantined bool
	retryAfter  time.Duration
	// Rewind: the new generation (version is the new version) and the
	// previous generation and position.
	generation, prevGeneration, prevPosition int64
}

type rowLock struct {
	t *txn
	m lockMode
}

type lockWait struct {
	t    *txn
	m    lockMode
	x    *stmt
	r    *row
	cont func()
}

type commitRec struct {
	from, to int64
	row      int
	owner    int
	version  int64
	at       time.Duration
}

// span is the items (from, to], from < to, of a partition.
type span struct{ from, to int64 }

// row is a task row plus the per-partition output log the checker keeps.
// A segment row (segment set, taskstore.Store.Split) holds items
// (start, available] of partition parent; it exists once the split that
// inserts it commits (ins is its inserting transaction until then, and
// it is visible to that transaction only), and is gone once deleted (or
// its insert rolled back).
type row struct {
	key         int
	version     int64
	owner       int // instance id; 0 is NULL
	heartbeatAt time.Duration
	leaseExp    time.Duration
	available   int64
	position    int64
	attempts    int
	failed      bool
	// rewinds is how many times a partition was rewound: its generation
	// is 1 + rewinds (partition.Store.Rewind).
	rewinds int64

	locks   []rowLock
	waiters []*lockWait

	segment bool
	parent  int   // a segment's partition
	start   int64 // a segment's first position
	ins     *txn  // the uncommitted insert of a segment row
	gone    bool  // deleted, or never committed
	segRows []*row

	// logEnd is the last item of the row's own range that is accounted
	// for: committed by its batches, or (a partition's) split off. A
	// row's batches commit its items in order: the next one starts after
	// logEnd.
	logEnd int64
	// done is a partition's ledger (not a segment's): the items
	// committed by its own batches and its segments', as disjoint spans
	// in order, each item in at most one; commits are those batches.
	done    []span
	commits []commitRec
}

// visible reports whether a row exists for statements other than the
// transaction inserting it.
func (r *row) visible() bool { return !r.gone && r.ins == nil }

// workerRow is a row of the workers table: registration, stop mark, and
// what the worker's heartbeats (and its claims and releases outside a
// transaction) wrote for the fair share.
type workerRow struct {
	expires   time.Duration
	stopped   bool
	stoppedAt time.Duration
	held      int
	wanted    int
	// backlog is the pending items of the rows held (workers.backlog).
	backlog int64
}

// left is how long a lease or registration ending at exp has left at now,
// saturating at the infinities.
func left(exp, now time.Duration) time.Duration {
	switch exp {
	case negInf:
		return negInf
	case posInf:
		return posInf
	}
	return exp - now
}

// claimable is decide.Claimable on a row: pending, not quarantined, its
// lease (or back-off) over.
func claimable(r *row, now time.Duration) bool {
	return decide.Claimable(r.available > r.position, r.failed, left(r.leaseExp, now))
}

// pausedRow reports whether r's partition (a segment's: the partition it
// belongs to) is paused.
func (st *store) pausedRow(r *row) bool {
	if r.segment {
		return st.paused[r.parent]
	}
	return st.paused[r.key]
}

// live is decide.Live on owner's worker row; an owner without one (never
// registered) is not live.
func (st *store) live(owner int, now time.Duration) bool {
	wr := st.workerRows[owner]
	return wr != nil && decide.Live(left(wr.expires, now), wr.stopped)
}

// stale is decide.Stale: an owned, claimable row whose owner is not live.
func (st *store) stale(r *row, now time.Duration) bool {
	return r.owner != 0 && decide.Stale(claimable(r, now), st.live(r.owner, now))
}

// registerOwner is a claim's insert of a worker row for an owner that has
// none (never heartbeated): not live, so that its rows are found stale
// once their leases end.
func (st *store) registerOwner(owner int, now time.Duration) *workerRow {
	wr := st.workerRows[owner]
	if wr == nil {
		wr = &workerRow{expires: now}
		st.workerRows[owner] = wr
	}
	return wr
}

// txn is a transaction: an explicit one (a batch) or the implicit one of
// an autocommit statement.
type txn struct {
	id       int
	explicit bool
	rows     []*row

	lease     leaseID
	owner     int
	readPos   int64
	wrote     bool
	writeFrom int64
	writeTo   int64
	advanced  bool
	newPos    int64
	aborted   bool
	ended     bool

	// A split (taskstore.Store.Split): its segments, the rows it inserted
	// and the finished segments it deletes, at commit.
	split    bool
	segs     []segSpan
	inserted []*row
	deleted  []*row

	// A claim made with its first batch (FenceUnownedGroup …
	// ClaimAdvanceGroup, a group of one):
	// the candidate, whether the claim statement ran, whether it also
	// released, and its now().
	claim   bool
	cand    candidate
	release bool
	claimAt time.Duration
}

// stmt is a statement executing in a session.
type stmt struct {
	sess       *session
	req        *request
	t          *txn
	start      time.Duration // now() of the statement
	waiting    *lockWait
	committing bool
	apply      func() response
	finished   bool
}

type session struct {
	conn       *conn
	txn        *txn
	queue      []*request
	cur        *stmt
	dead       bool
	clientGone bool
	idleGen    int
}

type store struct {
	s          *sim
	rows       []*row
	workerRows map[int]*workerRow
	sessions   []*session
	down       bool
	stallUntil time.Duration
	nextTxn    int
	// claimLocks are FenceUnownedGroup's advisory locks, by partition.
	claimLocks map[int]*txn
	// segKeys finds segment rows by partition and start: the primary key
	// of a segment (partition.SegmentKey).
	segKeys map[segKey]*row
	// paused are the partitions an operator paused (the pauses table;
	// set by the conformance harness only): never claimed, and reported
	// to their owners by heartbeats.
	paused map[int]bool
}

type segKey struct {
	parent int
	start  int64
}

// parentOf is the partition whose items r holds: r or its parent.
func (st *store) parentOf(r *row) *row {
	if r.segment {
		return st.rows[r.parent]
	}
	return r
}

// isSegment reports whether key names a segment (partition.ParseSegmentKey
// on the key).
func (st *store) isSegment(key int) bool { return key < len(st.rows) && st.rows[key].segment }

func newStore(s *sim) *store {
	st := &store{s: s, workerRows: map[int]*workerRow{}}
	for k := 0; k < s.cfg.Partitions; k++ {
		st.rows = append(st.rows, &row{key: k, leaseExp: negInf})
	}
	return st
}

func (st *store) describe(r *row) string {
	var locks []string
	for _, l := range r.locks {
		var modes []string
		for _, m := range []struct {
			m    lockMode
			name string
		}{{lockKeyShare, "key-share"}, {lockShare, "share"}, {lockNoKeyUpdate, "no-key-update"}, {lockUpdate, "update"}} {
			if l.m&m.m != 0 {
				modes = append(modes, m.name)
			}
		}
		locks = append(locks, fmt.Sprintf("txn%d:%s", l.t.id, strings.Join(modes, "+")))
	}
	exp := "-inf"
	switch r.leaseExp {
	case posInf:
		exp = "+inf"
	case negInf:
	default:
		exp = r.leaseExp.String()
	}
	seg := ""
	if r.segment {
		seg = fmt.Sprintf("segment of p%d ", r.parent)
	}
	return fmt.Sprintf("%sversion=%d owner=w%d lease_expires_at=%s position=%d available=%d attempts=%d failed=%v gone=%v locks=[%s] waiters=%d",
		seg, r.version, r.owner, exp, r.position, r.available, r.attempts, r.failed, r.gone, strings.Join(locks, " "), len(r.waiters))
}

// ---- sessions -----------------------------------------------------------

// internal runs a statement for a producer or the operator, directly on
// the server.
func (st *store) internal(req *request, reply func(response)) {
	c := st.s.newConn(nil)
	c.internal = reply
	st.arrive(c, req)
}

func (st *store) arrive(c *conn, req *request) {
	s := st.s
	if c.sess == nil {
		if req.kind == reqClose {
			return
		}
		if st.down {
			// Connection refused.
			s.sendDown(c, response{err: errNet, terminate: true})
			return
		}
		c.sess = &session{conn: c}
		st.sessions = append(st.sessions, c.sess)
	}
	ss := c.sess
	if ss.dead {
		return
	}
	if req.kind == reqClose {
		// The client closed the connection (after a rollback, a context
		// cancellation or at exit). pgx's default context watcher only
		// sets a deadline on the socket and sends no cancel request, and
		// a backend busy with a statement (waiting for a lock, committing)
		// does not notice the closed socket: the statement runs to its
		// end, then the session ends.
		if ss.cur != nil {
			ss.clientGone = true
			return
		}
		st.kill(ss, errNone)
		return
	}
	ss.queue = append(ss.queue, req)
	if ss.cur == nil {
		st.next(ss)
	}
}

func (st *store) next(ss *session) {
	s := st.s
	if ss.dead {
		return
	}
	if len(ss.queue) == 0 {
		if ss.clientGone {
			st.kill(ss, errNone)
			return
		}
		if ss.txn != nil && s.cfg.Mutation&MutNoIdleTimeout == 0 {
			gen := ss.idleGen
			s.after(s.cfg.IdleTxTimeout, func() {
				if !ss.dead && ss.idleGen == gen && ss.cur == nil && ss.txn != nil {
					s.tracef("store: txn%d idle in transaction too long, session terminated", ss.txn.id)
					code := errIdleTimeout
					if s.rng.IntN(2) == 0 {
						code = errNet
					}
					st.kill(ss, code)
				}
			})
		}
		return
	}
	req := ss.queue[0]
	ss.queue = ss.queue[1:]
	ss.idleGen++
	x := &stmt{sess: ss, req: req, start: s.now}
	ss.cur = x
	s.after(s.randDur(0, 300*time.Microsecond), func() {
		if !x.finished {
			st.exec(x)
		}
	})
}

// kill ends a session: its statement and transaction are aborted, its
// locks released. notify, if set, is the error its client will see.
func (st *store) kill(ss *session, notify errKind) {
	if ss.dead {
		return
	}
	ss.dead = true
	if x := ss.cur; x != nil {
		x.finished = true
		st.unwait(x)
		if x.t != nil && !x.t.explicit {
			st.endTxn(x.t)
		}
		ss.cur = nil
	}
	if ss.txn != nil {
		st.s.tracef("store: txn%d (%s by w%d) aborted", ss.txn.id, ss.txn.lease, ss.txn.owner)
		st.endTxn(ss.txn)
		ss.txn = nil
	}
	if notify != errNone {
		st.s.sendDown(ss.conn, response{err: notify, terminate: true})
	}
	st.sessions = slices.DeleteFunc(st.sessions, func(o *session) bool { return o == ss })
}

// restart ends every session, as a database restart does. A commit in
// progress survives or not, at random (its WAL record may have been
// flushed). The database accepts connections again after downtime.
func (st *store) restart(downtime time.Duration) {
	s := st.s
	s.tracef("store: restart, down for %s", downtime)
	st.down = true
	for _, ss := range slices.Clone(st.sessions) {
		if x := ss.cur; x != nil && x.committing && !x.finished && s.rng.IntN(2) == 0 {
			x.finished = true
			x.apply()
			if !x.t.explicit {
				st.endTxn(x.t)
			}
			ss.cur = nil
		}
		code := errShutdown
		if s.rng.IntN(2) == 0 {
			code = errNet
		}
		st.kill(ss, code)
	}
	s.after(downtime, func() {
		st.down = false
		s.tracef("store: up")
	})
}

// ---- locks ----------------------------------------------------------------

func (st *store) canLock(t *txn, r *row, m lockMode) bool {
	for _, l := range r.locks {
		if l.t != t && conflicts(l.m, m) {
			return false
		}
	}
	return true
}

func (st *store) addLock(t *txn, r *row, m lockMode) {
	for i := range r.locks {
		if r.locks[i].t == t {
			r.locks[i].m |= m
			return
		}
	}
	r.locks = append(r.locks, rowLock{t: t, m: m})
	t.rows = append(t.rows, r)
}

func (st *store) lockedByOthers(t *txn, r *row) bool {
	for _, l := range r.locks {
		if l.t != t {
			return true
		}
	}
	return false
}

// acquire takes a row lock for statement x and continues with cont, at
// once or after waiting (bounded by lock_timeout and statement_timeout).
func (st *store) acquire(x *stmt, r *row, m lockMode, cont func()) {
	if st.canLock(x.t, r, m) {
		st.addLock(x.t, r, m)
		cont()
		return
	}
	s := st.s
	w := &lockWait{t: x.t, m: m, x: x, r: r, cont: cont}
	r.waiters = append(r.waiters, w)
	x.waiting = w
	deadline := min(s.now+s.cfg.LockTimeout, x.start+s.cfg.StatementTimeout)
	code := errLockTimeout
	if x.start+s.cfg.StatementTimeout < s.now+s.cfg.LockTimeout {
		code = errStmtTimeout
	}
	s.at(deadline, func() {
		if x.waiting == w && !x.finished {
			st.fail(x, code)
		}
	})
}

func (st *store) unwait(x *stmt) {
	if w := x.waiting; w != nil {
		w.r.waiters = slices.DeleteFunc(w.r.waiters, func(o *lockWait) bool { return o == w })
		x.waiting = nil
	}
}

// endTxn releases a transaction's locks and wakes compatible waiters.
func (st *store) endTxn(t *txn) {
	if t.ended {
		return
	}
	t.ended = true
	if t.claim && st.claimLocks[t.lease.key] == t {
		delete(st.claimLocks, t.lease.key)
	}
	for _, r := range t.inserted {
		if r.ins == t { // rolled back
			r.ins, r.gone = nil, true
		}
	}
	for _, r := range t.rows {
		r.locks = slices.DeleteFunc(r.locks, func(l rowLock) bool { return l.t == t })
		st.wake(r)
	}
	t.rows = nil
}

func (st *store) wake(r *row) {
	for i := 0; i < len(r.waiters); {
		w := r.waiters[i]
		if !st.canLock(w.t, r, w.m) {
			i++
			continue
		}
		r.waiters = slices.Delete(r.waiters, i, i+1)
		st.addLock(w.t, r, w.m)
		w.x.waiting = nil
		x := w.x
		cont := w.cont
		st.s.after(0, func() {
			if !x.finished {
				cont()
			}
		})
	}
}

// ---- statement completion ---------------------------------------------

func (st *store) done(x *stmt, resp response) {
	if x.finished {
		return
	}
	x.finished = true
	ss := x.sess
	if !x.t.explicit {
		st.endTxn(x.t)
	} else if resp.err != errNone && resp.err != errFenced {
		x.t.aborted = true
	}
	ss.cur = nil
	st.s.sendDown(ss.conn, resp)
	st.next(ss)
}

func (st *store) fail(x *stmt, code errKind) {
	st.unwait(x)
	st.done(x, response{err: code})
}

// commit makes x's writes durable and visible after the commit latency,
// which a stall stretches; its locks are held until then.
func (st *store) commit(x *stmt, apply func() response) {
	s := st.s
	x.committing = true
	x.apply = apply
	var finish func()
	finish = func() {
		if x.finished {
			return
		}
		if s.now < st.stallUntil {
			s.at(st.stallUntil+s.randDur(0, time.Millisecond), finish)
			return
		}
		resp := apply()
		st.done(x, resp)
	}
	s.after(s.randDur(50*time.Microsecond, 2*time.Millisecond), finish)
}

// ---- statements -----------------------------------------------------------

func (st *store) exec(x *stmt) {
	s := st.s
	req := x.req
	ss := x.sess
	mut := s.cfg.Mutation
	switch req.kind {
	case reqBeginFence, reqWrite, reqAdvance, reqCommit, reqFenceUnowned, reqClaimAdvance, reqSplit:
		if req.kind == reqBeginFence {
			if ss.txn == nil {
				st.nextTxn++
				ss.txn = &txn{id: st.nextTxn, explicit: true, lease: req.lease, owner: req.owner}
			}
		}
		if req.kind == reqFenceUnowned && ss.txn == nil {
			st.nextTxn++
			ss.txn = &txn{id: st.nextTxn, explicit: true, lease: leaseID{req.cand.key, req.cand.version + 1},
				owner: req.owner, claim: true, cand: req.cand}
		}
		x.t = ss.txn
		if x.t == nil {
			st.done(x, response{err: errTxAborted})
			return
		}
		if x.t.aborted && req.kind != reqCommit {
			st.done(x, response{err: errTxAborted})
			return
		}
	default:
		st.nextTxn++
		x.t = &txn{id: st.nextTxn}
	}
	t := x.t

	switch req.kind {
	case reqHeartbeat:
		// taskstore.Store.HeartbeatBelow: the worker's row, the listed
		// leases still ours (those with less than renewBelow left rewritten
		// under FOR NO KEY UPDATE, waited for as renewWaiting does; the
		// others returned fresh with what they have left), and the hand-back
		// of the worker's unlisted rows past their leases (FOR UPDATE SKIP
		// LOCKED).
		wr := st.workerRows[req.owner]
		listed := map[leaseID]bool{}
		for _, l := range req.leases {
			listed[l] = true
		}
		heldNow, backlogNow := 0, int64(0)
		var back []*row
		for _, r := range st.rows {
			if r.owner != req.owner || !r.visible() {
				continue
			}
			if left(r.leaseExp, x.start) > 0 {
				heldNow++
				backlogNow += max(0, r.available-r.position)
			}
			if decide.HandBack(listed[leaseID{r.key, r.version}], left(r.leaseExp, x.start)) && !st.lockedByOthers(t, r) {
				st.addLock(t, r, lockUpdate)
				back = append(back, r)
			}
		}
		var rows []*row
		var fresh []renewal
		for _, l := range sortedLeases(req.leases) {
			r := st.rows[l.key]
			if r.version != l.version || r.owner != req.owner || !r.visible() {
				continue
			}
			if rem := left(r.leaseExp, x.start); !decide.Rewrite(rem, req.renewBelow) {
				fresh = append(fresh, renewal{leaseID: l, available: r.available, position: r.position, fresh: true, remaining: max(0, rem),
					paused: st.pausedRow(r)})
				continue
			}
			rows = append(rows, r)
		}
		var renewed []*row
		var lockNext func(i int)
		lockNext = func(i int) {
			if i == len(rows) {
				st.commit(x, func() response {
					switch {
					case wr == nil:
						st.workerRows[req.owner] = &workerRow{expires: x.start + s.cfg.StaleAfter, held: heldNow, wanted: req.wanted,
							backlog: backlogNow}
						st.notify(notifyJoined)
					case !wr.stopped:
						wr.expires, wr.held, wr.wanted, wr.backlog = x.start+s.cfg.StaleAfter, heldNow, req.wanted, backlogNow
					}
					out := make([]renewal, 0, len(renewed)+len(fresh))
					for _, r := range renewed {
						r.heartbeatAt = x.start
						r.leaseExp = x.start + s.cfg.StaleAfter
						out = append(out, renewal{leaseID: leaseID{r.key, r.version}, available: r.available, position: r.position,
							paused: st.pausedRow(r)})
					}
					notify := false
					for _, r := range back {
						if r.owner != req.owner || left(r.leaseExp, x.start) > 0 {
							continue
						}
						st.setVersion(r, r.version+1, fmt.Sprintf("hand-back by w%d's heartbeat", req.owner))
						r.owner, r.heartbeatAt, r.leaseExp = 0, 0, negInf
						s.res.Releases++
						s.tracef("store: p%d handed back by w%d's heartbeat (lease ended, not listed), now v%d", r.key, req.owner, r.version)
						notify = notify || r.available > r.position
					}
					if notify {
						st.notify(notifyReleased)
					}
					return response{renewals: append(out, fresh...)}
				})
				return
			}
			r := rows[i]
			l := leaseID{r.key, r.version}
			st.acquire(x, r, lockNoKeyUpdate, func() {
				// Re-checked on the row as locked (EvalPlanQual).
				if r.version == l.version && r.owner == req.owner {
					renewed = append(renewed, r)
				}
				lockNext(i + 1)
			})
		}
		lockNext(0)

	case reqInspect:
		var out []heldLease
		for _, l := range req.leases {
			if r := st.rows[l.key]; r.version == l.version && r.owner == req.owner && r.visible() {
				out = append(out, heldLease{l, max(0, r.leaseExp-x.start)})
			}
		}
		st.done(x, response{held: out})

	case reqCandidates, reqStaleCandidates:
		// Candidates: unowned claimable rows (the claimable index) and
		// stale ones (decide.Stale: the owner is not live); StaleCandidates
		// the stale ones only. A live owner's row past its lease is
		// neither: its owner's next heartbeat hands it back.
		staleOnly := req.kind == reqStaleCandidates
		var rows []*row
		for _, r := range st.rows {
			if !r.visible() {
				continue
			}
			if !st.pausedRow(r) && (st.stale(r, x.start) || !staleOnly && r.owner == 0 && claimable(r, x.start)) {
				rows = append(rows, r)
			}
		}
		slices.SortStableFunc(rows, func(a, b *row) int {
			if a.leaseExp < b.leaseExp {
				return -1
			} else if a.leaseExp > b.leaseExp {
				return 1
			}
			return 0
		})
		var out []candidate
		for _, r := range rows[:min(len(rows), req.limit)] {
			out = append(out, candidate{leaseID{r.key, r.version}, r.owner != 0})
		}
		st.done(x, response{cands: out})

	case reqClaim:
		cands := slices.Clone(req.cands)
		slices.SortFunc(cands, func(a, b candidate) int { return a.key - b.key })
		type win struct {
			r *row
			c candidate
		}
		var wins []win
		for _, c := range cands {
			r := st.rows[c.key]
			if !r.visible() {
				continue
			}
			if mut&MutClaimNoCAS == 0 {
				if r.version != c.version || !claimable(r, x.start) {
					continue
				}
			}
			if st.pausedRow(r) {
				continue
			}
			if st.lockedByOthers(t, r) {
				continue // SKIP LOCKED
			}
			st.addLock(t, r, lockUpdate)
			wins = append(wins, win{r, c})
		}
		st.commit(x, func() response {
			var out []claimed
			for _, wn := range wins {
				r := wn.r
				nv := r.version + 1
				if mut&MutClaimNoCAS != 0 {
					nv = wn.c.version + 1
				}
				if r.owner != 0 {
					s.res.Takeover++
					s.checkTakeover(r, req.owner, x.start)
				}
				st.setVersion(r, nv, fmt.Sprintf("claim by w%d", req.owner))
				r.owner = req.owner
				r.heartbeatAt = x.start
				r.leaseExp = x.start + s.cfg.StaleAfter
				s.res.Claims++
				if r.segment {
					s.res.SegmentClaims++
				}
				s.tracef("store: p%d claimed by w%d at v%d (takeover=%v) position=%d available=%d", r.key, req.owner, r.version, wn.c.owned, r.position, r.available)
				out = append(out, claimed{leaseID{r.key, r.version}, wn.c.owned, r.position, r.available})
			}
			if len(out) > 0 {
				// Outside a transaction the claim raises the claimer's
				// held count and backlog (registering an owner that has
				// no row).
				wr := st.registerOwner(req.owner, x.start)
				wr.held += len(out)
				for _, c := range out {
					wr.backlog += max(0, c.available-c.position)
				}
			}
			return response{won: out}
		})

	case reqRelease, reqFail:
		r := st.rows[req.lease.key]
		if r.version != req.lease.version || r.owner != req.owner || !r.visible() {
			st.done(x, response{})
			return
		}
		st.acquire(x, r, lockUpdate, func() {
			if r.version != req.lease.version || r.owner != req.owner || !r.visible() {
				st.done(x, response{})
				return
			}
			st.commit(x, func() response {
				if req.kind == reqRelease {
					st.setVersion(r, r.version+1, fmt.Sprintf("release by w%d", req.owner))
					r.owner, r.heartbeatAt, r.leaseExp = 0, 0, negInf
					if wr := st.workerRows[req.owner]; wr != nil {
						wr.held = max(0, wr.held-1)
						wr.backlog = max(0, wr.backlog-max(0, r.available-r.position))
					}
					s.res.Releases++
					s.tracef("store: p%d released by w%d, now v%d", r.key, req.owner, r.version)
					if r.available > r.position {
						st.notify(notifyReleased)
					}
					return response{released: true}
				}
				backoff := decide.Backoff(s.cfg.Backoff, s.cfg.MaxBackoff, r.attempts)
				quarantine := decide.Quarantine(r.attempts+1, req.attempts)
				r.attempts++
				st.setVersion(r, r.version+1, fmt.Sprintf("failure by w%d", req.owner))
				r.owner, r.heartbeatAt = 0, 0
				r.failed = quarantine
				if quarantine {
					r.leaseExp = posInf
				} else {
					r.leaseExp = x.start + backoff
				}
				s.res.Failures++
				s.tracef("store: p%d failed by w%d (attempt %d, quarantined=%v), now v%d", r.key, req.owner, r.attempts, quarantine, r.version)
				resp := response{released: true, attempts: r.attempts, quarantined: quarantine}
				if !quarantine {
					resp.retryAfter = backoff
				}
				return resp
			})
		})

	case reqProgress:
		r := st.rows[req.key]
		if !r.visible() {
			st.done(x, response{err: errNotFound})
			return
		}
		st.done(x, response{version: r.version, position: r.position})

	case reqFairShareLoad:
		st.done(x, response{load: st.fairShareLoad(req.owner, req.maxPartitions, x.start)})

	case reqQuarantinedCount:
		n := 0
		for _, r := range st.rows {
			if r.failed && r.visible() {
				n++
			}
		}
		st.done(x, response{count: n})

	case reqPendingWork:
		n := 0
		for _, r := range st.rows {
			if !r.failed && r.available > r.position && r.visible() {
				n++
			}
		}
		st.done(x, response{count: n})

	case reqSegmentsHeldByOthers:
		var n int64
		for _, r := range st.rows {
			if r.segment && r.visible() && r.owner != 0 && r.owner != req.owner && left(r.leaseExp, x.start) > 0 &&
				slices.Contains(req.keys, r.parent) {
				n += max(0, r.available-r.position)
			}
		}
		st.done(x, response{items: n})

	case reqStopWorker:
		st.commit(x, func() response {
			if wr := st.workerRows[req.owner]; wr != nil {
				wr.stopped, wr.expires, wr.stoppedAt = true, x.start, x.start
				st.notify(notifyLeft)
			}
			return response{}
		})

	case reqBeginFence:
		r := st.rows[req.lease.key]
		st.countStale(r, t)
		check := func() {
			if mut&MutNoFence == 0 && (r.version != req.lease.version || r.owner != req.owner || !r.visible()) {
				s.tracef("store: txn%d fence of %s by w%d finds %s", t.id, req.lease, req.owner, st.describe(r))
				st.done(x, response{err: errFenced})
				return
			}
			t.readPos = r.position
			s.tracef("store: txn%d fences %s for w%d, reads position %d available %d", t.id, req.lease, req.owner, r.position, r.available)
			st.done(x, response{position: r.position, available: r.available})
		}
		if mut&MutNoFence != 0 {
			check()
			return
		}
		st.acquire(x, r, lockKeyShare, check)

	case reqFenceUnowned:
		// taskstore.Store.FenceUnownedGroup of one: the unowned, claimable row at the
		// candidate's version, FOR KEY SHARE SKIP LOCKED, and the
		// transaction-scoped advisory lock, not waited for.
		r := st.rows[t.lease.key]
		if !r.visible() || !claimable(r, x.start) || r.owner != 0 || st.pausedRow(r) || (mut&MutClaimNoCAS == 0 && r.version != t.cand.version) {
			s.tracef("store: txn%d fence of unowned %s by w%d finds %s", t.id, t.cand.leaseID, req.owner, st.describe(r))
			st.done(x, response{err: errClaimLost})
			return
		}
		if o := st.claimLocks[r.key]; o != nil && o != t && !o.ended {
			st.done(x, response{err: errClaimLost})
			return
		}
		if mut&MutNoFence == 0 {
			if !st.canLock(t, r, lockKeyShare) {
				st.done(x, response{err: errClaimLost}) // SKIP LOCKED
				return
			}
			st.addLock(t, r, lockKeyShare)
		}
		if st.claimLocks == nil {
			st.claimLocks = map[int]*txn{}
		}
		st.claimLocks[r.key] = t
		t.readPos = r.position
		s.tracef("store: txn%d fences unowned %s for w%d's claim, reads position %d available %d", t.id, t.cand.leaseID, req.owner, r.position, r.available)
		st.done(x, response{position: r.position, available: r.available, version: r.version})

	case reqClaimAdvance:
		// taskstore.Store.ClaimAdvanceGroup of one: Claim's compare-and-set under FOR
		// UPDATE SKIP LOCKED, the checkpoint compare-and-set, and the
		// release when asked; applied at commit (applyCommit).
		r := st.rows[t.lease.key]
		if !st.canLock(t, r, lockUpdate) {
			s.tracef("store: txn%d claim of %s skips a row locked by another transaction", t.id, t.lease)
			st.done(x, response{err: errClaimLost})
			return
		}
		if !r.visible() || !claimable(r, x.start) || st.pausedRow(r) || (mut&MutClaimNoCAS == 0 && (r.version != t.cand.version || r.owner != 0)) || r.position != t.readPos {
			s.tracef("store: txn%d claim of %s finds %s", t.id, t.lease, st.describe(r))
			st.done(x, response{err: errClaimLost})
			return
		}
		st.addLock(t, r, lockUpdate)
		t.advanced, t.newPos, t.release, t.claimAt = true, req.newPos, req.release, x.start
		st.done(x, response{})

	case reqSplit:
		st.execSplit(x, t, req.segs)

	case reqRewind:
		st.execRewind(x, req)

	case reqWrite:
		st.countStale(st.rows[t.lease.key], t)
		if !t.wrote {
			t.wrote, t.writeFrom = true, req.from
		}
		t.writeTo = req.to
		st.done(x, response{})

	case reqAdvance:
		r := st.rows[t.lease.key]
		st.countStale(r, t)
		if !st.canLock(t, r, lockNoKeyUpdate) {
			s.tracef("store: txn%d checkpoint update of %s to %d waits for a row lock: %s", t.id, t.lease, req.newPos, st.describe(r))
		}
		st.acquire(x, r, lockNoKeyUpdate, func() {
			if mut&MutNoFence == 0 && (r.version != t.lease.version || !r.visible()) {
				st.done(x, response{err: errFenced})
				return
			}
			if s.cfg.AdvanceCAS && r.position != t.readPos {
				s.tracef("store: txn%d checkpoint of p%d moved from %d to %d since the fence", t.id, r.key, t.readPos, r.position)
				st.done(x, response{err: errCheckpointMoved})
				return
			}
			t.advanced, t.newPos = true, req.newPos
			st.done(x, response{})
		})

	case reqCommit:
		st.countStale(st.rows[t.lease.key], t)
		if t.aborted {
			ss.txn = nil
			st.endTxn(t)
			st.done(x, response{err: errTxAborted})
			return
		}
		if t.advanced {
			s.tracef("store: txn%d commit of %s items %d..%d by w%d starts", t.id, t.lease, t.writeFrom, t.writeTo, t.owner)
		}
		st.commit(x, func() response {
			st.applyCommit(t)
			ss.txn = nil
			return response{}
		})

	case reqProduce:
		r := st.rows[req.key]
		st.acquire(x, r, lockNoKeyUpdate, func() {
			st.commit(x, func() response {
				r.available += req.n
				s.tracef("store: p%d +%d work, available=%d", r.key, req.n, r.available)
				st.notify(notifyWork)
				return response{}
			})
		})

	case reqRetry:
		r := st.rows[req.key]
		if !r.visible() {
			st.done(x, response{err: errNotFound})
			return
		}
		st.acquire(x, r, lockUpdate, func() {
			if r.owner != 0 || (!r.failed && r.attempts == 0) || !r.visible() {
				st.done(x, response{})
				return
			}
			st.commit(x, func() response {
				r.failed, r.attempts, r.leaseExp = false, 0, negInf
				st.setVersion(r, r.version+1, "operator retry")
				s.tracef("store: p%d retried by the operator, now v%d", r.key, r.version)
				st.notify(notifyWork)
				return response{released: true}
			})
		})
	}
}

// execSplit is taskstore.Store.Split in the batch's transaction t: it
// locks the partition's finished segments that nobody holds (FOR UPDATE
// SKIP LOCKED) to delete them at commit, and inserts a row per segment,
// in key order, visible to t alone until it commits. An insert whose key
// another transaction has inserted waits for that transaction (lock_timeout
// and statement_timeout bound the wait, as for a row lock) and fails with a
// unique violation if it committed; a key that exists already fails at
// once.
func (st *store) execSplit(x *stmt, t *txn, segs []segSpan) {
	r := st.rows[t.lease.key]
	st.countStale(r, t)
	if st.segKeys == nil {
		st.segKeys = map[segKey]*row{}
	}
	r.segRows = slices.DeleteFunc(r.segRows, func(g *row) bool { return g.gone })
	var deleted []*row
	for _, g := range r.segRows {
		if g.visible() && g.owner == 0 && g.position >= g.available && !st.lockedByOthers(t, g) {
			st.addLock(t, g, lockUpdate)
			deleted = append(deleted, g)
		}
	}
	var insert func(i int)
	insert = func(i int) {
		if i == len(segs) {
			t.split, t.segs, t.deleted = true, segs, deleted
			st.s.tracef("store: txn%d splits p%d into %d segments of items %d..%d, deleting %d finished", t.id, r.key, len(segs), segs[0].start+1, segs[len(segs)-1].end, len(deleted))
			st.done(x, response{})
			return
		}
		g := segs[i]
		k := segKey{r.key, g.start}
		if o := st.segKeys[k]; o != nil && !o.gone && o.ins != t {
			st.s.res.SplitKeyConflicts++
			if o.ins == nil {
				st.s.tracef("store: txn%d split of p%d: segment at %d exists (p%d)", t.id, r.key, g.start, o.key)
				st.done(x, response{err: errUnique})
				return
			}
			st.acquire(x, o, lockUpdate, func() { insert(i) })
			return
		}
		nr := &row{key: len(st.rows), segment: true, parent: r.key, start: g.start, position: g.start, available: g.end,
			logEnd: g.start, leaseExp: negInf, ins: t}
		st.rows = append(st.rows, nr)
		st.segKeys[k] = nr
		r.segRows = append(r.segRows, nr)
		st.addLock(t, nr, lockUpdate)
		t.inserted = append(t.inserted, nr)
		insert(i + 1)
	}
	insert(0)
}

// execRewind is partition.Store.Rewind of one partition, in a
// transaction of its own: it locks the partition FOR UPDATE (waiting for
// a batch's fence), then looks for the partition's segments, as a
// statement that starts once the partition is held does, so a split that
// committed during the wait is seen, and locks them FOR UPDATE in key
// order (waiting for their batches); at commit it deletes them and gives
// the partition the next generation and version, the position asked for,
// no owner, no failure or back-off. The partition's ledger starts again
// with the new generation: items up to the position count as done, the
// rest are processed once more. A missing partition or a position beyond
// its work is refused (errNotFound), changing nothing.
// MutRewindStaleSegments looks for the segments when the statement
// starts instead, as a single statement whose snapshot predates its wait
// does.
func (st *store) execRewind(x *stmt, req *request) {
	s := st.s
	r := st.rows[req.key]
	if !r.visible() || r.segment {
		st.done(x, response{err: errNotFound})
		return
	}
	segments := func() []*row {
		var out []*row
		for _, g := range r.segRows {
			if g.visible() {
				out = append(out, g)
			}
		}
		slices.SortFunc(out, func(a, b *row) int { return cmp.Compare(a.start, b.start) })
		return out
	}
	var early []*row
	if s.cfg.Mutation&MutRewindStaleSegments != 0 {
		early = segments()
	}
	st.acquire(x, r, lockUpdate, func() {
		if !r.visible() || req.newPos < 0 || req.newPos > r.available {
			st.done(x, response{err: errNotFound})
			return
		}
		segs := early
		if s.cfg.Mutation&MutRewindStaleSegments == 0 {
			segs = segments()
		}
		var lockSeg func(i int)
		lockSeg = func(i int) {
			if i < len(segs) {
				st.acquire(x, segs[i], lockUpdate, func() { lockSeg(i + 1) })
				return
			}
			st.commit(x, func() response {
				resp := response{prevGeneration: 1 + r.rewinds, prevPosition: r.position}
				for _, g := range segs {
					g.gone = true
				}
				r.rewinds++
				st.setVersion(r, r.version+1, "rewind")
				r.position, r.logEnd = req.newPos, req.newPos
				r.owner, r.heartbeatAt, r.leaseExp = 0, 0, negInf
				r.failed, r.attempts = false, 0
				r.done, r.commits = nil, nil
				if req.newPos > 0 {
					r.done = []span{{0, req.newPos}}
				}
				s.tracef("store: p%d rewound to generation %d at position %d, now v%d; %d segments deleted", r.key, 1+r.rewinds, r.position, r.version, len(segs))
				st.notify(notifyWork)
				resp.generation, resp.version = 1+r.rewinds, r.version
				return resp
			})
		}
		lockSeg(0)
	})
}

func sortedLeases(ls []leaseID) []leaseID {
	out := slices.Clone(ls)
	slices.SortFunc(out, func(a, b leaseID) int { return a.key - b.key })
	return out
}

// countStale counts batch statements arriving for a claim that is no
// longer current.
func (st *store) countStale(r *row, t *txn) {
	if t.claim {
		return // the claim is made at commit
	}
	if r.version != t.lease.version || r.owner != t.owner {
		st.s.res.StaleStatements++
	}
}

// What a notification says changed (internal/notify).
type notifyKind int

const (
	notifyWork     notifyKind = iota // work added or retried
	notifyReleased                   // partitions with work released
	notifyLeft                       // a worker marked itself stopped
	notifyJoined                     // a worker's first heartbeat registered it
)

// notify is pg_notify: every worker listening is woken, unless it is cut
// off from the database.
func (st *store) notify(kind notifyKind) {
	s := st.s
	for _, w := range s.slots {
		if w == nil || w.state == wCrashed || w.state == wExited || w.partitioned {
			continue
		}
		w := w
		s.after(s.netDelay(w), func() {
			if !w.partitioned {
				w.post(nil, func() { w.notified(kind) })
			}
		})
	}
}

// ---- invariants checked by the store ----------------------------------

// setVersion is the only place a version changes: versions only increase
// (invariant 5), so each version names exactly one claim's tenure.
func (st *store) setVersion(r *row, v int64, why string) {
	if v <= r.version {
		st.s.violate("versions increase", r.key, "partition %d: %s sets version %d, but it was already %d (two claims share a version)", r.key, why, v, r.version)
	}
	r.version = v
}

// applyCommit is the commit of a batch. It checks invariants 1–3 against
// the row as it is at the moment of commit, then applies the checkpoint
// and appends the output to the partition's log.
func (st *store) applyCommit(t *txn) {
	s := st.s
	defer st.endTxn(t)
	if t.split && !t.advanced {
		r := st.rows[t.lease.key]
		s.violate("checkpoint exact", r.key, "partition %d: split into %d segments committed by w%d under v%d without moving the checkpoint past them",
			r.key, len(t.segs), t.owner, t.lease.version)
		return
	}
	if !t.advanced {
		return
	}
	r := st.rows[t.lease.key]
	if t.claim {
		// The claim made with the batch applies first: its row must still
		// be the unowned candidate (the claim statement's lock held it).
		if r.version != t.cand.version || r.owner != 0 {
			s.violate("single writer", r.key, "partition %d: claim of w%d with its first batch over v%d (items %d..%d) committed while the row is at v%d owned by w%d",
				r.key, t.owner, t.cand.version, t.writeFrom, t.writeTo, r.version, r.owner)
			return
		}
		st.setVersion(r, t.lease.version, fmt.Sprintf("claim with first batch by w%d", t.owner))
		st.registerOwner(t.owner, t.claimAt)
		r.owner, r.heartbeatAt, r.leaseExp = t.owner, t.claimAt, t.claimAt+s.cfg.StaleAfter
		s.res.Claims++
		s.res.ClaimsWithBatch++
		if r.segment {
			s.res.SegmentClaims++
		}
		s.tracef("store: p%d claimed by w%d at v%d with its first batch", r.key, t.owner, r.version)
	}
	var n int64
	if t.wrote {
		n = t.writeTo - t.writeFrom + 1
	}
	p := st.parentOf(r)
	if r.version != t.lease.version || r.owner != t.owner {
		s.violate("single writer", r.key, "partition %d: batch of w%d under v%d (items %d..%d) committed while the row is at v%d owned by w%d",
			r.key, t.owner, t.lease.version, t.writeFrom, t.writeTo, r.version, r.owner)
		return
	}
	if t.newPos < r.position {
		s.violate("checkpoint monotone", r.key, "partition %d: checkpoint goes backwards from %d to %d (w%d v%d)", r.key, r.position, t.newPos, t.owner, t.lease.version)
		return
	}
	if n > 0 {
		// Exactly once, per item of the partition, whichever of its rows
		// (itself or a segment) commits it.
		if c, ok := p.overlap(t.writeFrom, t.writeTo); ok {
			item := max(t.writeFrom, c.from)
			s.violate("exactly-once", r.key, "partition %d: items %d..%d committed again by w%d under v%d on p%d (checkpoint read %d); item %d was committed at %s by w%d under v%d on p%d (items %d..%d)",
				p.key, t.writeFrom, t.writeTo, t.owner, t.lease.version, r.key, t.readPos,
				item, c.at, c.owner, c.version, c.row, c.from, c.to)
			return
		}
		if t.writeFrom != r.logEnd+1 {
			s.violate("exactly-once", r.key, "partition %d: gap: items %d..%d committed on p%d after item %d", p.key, t.writeFrom, t.writeTo, r.key, r.logEnd)
			return
		}
	}
	if t.split {
		// The segments cover the items the checkpoint moves past, one
		// after the other, and nothing else.
		at := r.position
		for _, g := range t.segs {
			if g.start != at || g.end <= g.start {
				s.violate("checkpoint exact", r.key, "partition %d: split by w%d under v%d moves the checkpoint from %d to %d with segments %v",
					r.key, t.owner, t.lease.version, r.position, t.newPos, t.segs)
				return
			}
			at = g.end
		}
		if n > 0 || r.segment || at != t.newPos {
			s.violate("checkpoint exact", r.key, "partition %d: split by w%d under v%d (segment: %v, %d items written) moves the checkpoint from %d to %d with segments %v",
				r.key, t.owner, t.lease.version, r.segment, n, r.position, t.newPos, t.segs)
			return
		}
	} else if t.newPos-r.position != n || (n > 0 && t.writeTo != t.newPos) {
		s.violate("checkpoint exact", r.key, "partition %d: checkpoint advances from %d to %d but the batch wrote %d items (%d..%d)",
			r.key, r.position, t.newPos, n, t.writeFrom, t.writeTo)
		return
	}
	if t.newPos > r.available {
		s.violate("checkpoint exact", r.key, "partition %d: checkpoint %d beyond available %d", r.key, t.newPos, r.available)
		return
	}
	if t.split {
		for _, g := range t.inserted {
			g.ins = nil
		}
		for _, g := range t.deleted {
			g.gone = true
		}
		r.position, r.logEnd = t.newPos, t.newPos
		r.attempts = 0
		s.res.Splits++
		s.res.Segments += len(t.inserted)
		s.lastProgress = s.now
		s.tracef("store: txn%d commits the split of p%d by w%d under v%d: %d segments (p%d..p%d), checkpoint %d, %d finished segments deleted",
			t.id, r.key, t.owner, t.lease.version, len(t.inserted), t.inserted[0].key, t.inserted[len(t.inserted)-1].key, r.position, len(t.deleted))
		s.committed(r.key, t.owner)
		st.notify(notifyWork)
		return
	}
	r.position = t.newPos
	r.attempts = 0
	if n > 0 {
		r.logEnd = t.writeTo
		p.record(commitRec{t.writeFrom, t.writeTo, r.key, t.owner, t.lease.version, s.now})
	}
	s.res.Commits++
	s.res.Items += n
	if n > 0 {
		if s.res.WorkerItems == nil {
			s.res.WorkerItems = map[int]int64{}
		}
		s.res.WorkerItems[t.owner] += n
	}
	s.lastProgress = s.now
	s.res.LastCommit = s.now
	s.tracef("store: txn%d commits p%d items %d..%d by w%d under v%d", t.id, r.key, t.writeFrom, t.writeTo, t.owner, t.lease.version)
	s.committed(r.key, t.owner)
	if t.claim && !t.release {
		// A claim kept past its first batch raises its worker's held
		// count and backlog at the commit.
		wr := st.registerOwner(t.owner, t.claimAt)
		wr.held++
		wr.backlog += max(0, r.available-r.position)
	}
	if t.claim && t.release {
		st.setVersion(r, r.version+1, fmt.Sprintf("release with claim by w%d", t.owner))
		r.owner, r.heartbeatAt, r.leaseExp = 0, 0, negInf
		s.res.Releases++
		s.tracef("store: p%d released by w%d with its claim, now v%d", r.key, t.owner, r.version)
		if r.available > r.position {
			st.notify(notifyReleased)
		}
	}
}

// overlap returns the commit of one of p's items in from..to, if any.
func (p *row) overlap(from, to int64) (commitRec, bool) {
	i, _ := slices.BinarySearchFunc(p.done, from, func(d span, item int64) int {
		if d.to < item {
			return -1
		}
		return 1
	})
	if i == len(p.done) || p.done[i].from >= to {
		return commitRec{}, false
	}
	for _, c := range p.commits {
		if c.from <= to && c.to >= from {
			return c, true
		}
	}
	return commitRec{from: p.done[i].from + 1, to: p.done[i].to, row: -1}, true
}

// record adds c's items to p's ledger, which they must not overlap.
func (p *row) record(c commitRec) {
	i, _ := slices.BinarySearchFunc(p.done, c.from, func(d span, item int64) int {
		if d.to < item {
			return -1
		}
		return 1
	})
	sp := span{c.from - 1, c.to}
	if i > 0 && p.done[i-1].to == sp.from {
		i--
		sp.from = p.done[i].from
		p.done = slices.Delete(p.done, i, i+1)
	}
	if i < len(p.done) && p.done[i].from == sp.to {
		sp.to = p.done[i].to
		p.done = slices.Delete(p.done, i, i+1)
	}
	p.done = slices.Insert(p.done, i, sp)
	p.commits = append(p.commits, c)
}

// fairShareLoad is taskstore.Store.FairShareLoad for worker self with
// room for maxPartitions: live workers and the partitions they hold (as
// their heartbeats, claims and releases wrote them), the leases of workers
// that stopped within a lease's length, and the claimable rows (unowned
// and stale), each counted up to a cap.
func (st *store) fairShareLoad(self, maxPartitions int, now time.Duration) taskstore.Load {
	var l taskstore.Load
	held, first := 0, true
	leaving := map[int]bool{}
	for id, wr := range st.workerRows {
		if decide.Live(left(wr.expires, now), wr.stopped) {
			l.LiveWorkers++
			held += wr.held
			l.Backlog += wr.backlog
			if id == self {
				l.SelfBacklog = wr.backlog
			}
			if first || wr.held < l.MinHeld {
				l.MinHeld, first = wr.held, false
			}
			if id != self {
				l.Wanted += wr.wanted
			}
		}
		if wr.stopped && wr.stoppedAt > now-st.s.cfg.StaleAfter {
			leaving[id] = true
		}
	}
	leavingLeases, pending := 0, false
	var unowned, stale []*row
	for _, r := range st.rows {
		if !r.visible() {
			continue
		}
		if leaving[r.owner] && left(r.leaseExp, now) > 0 {
			leavingLeases++
			l.Backlog += max(0, r.available-r.position)
		}
		switch {
		case st.pausedRow(r):
			// Never claimed while paused: not in the share's count.
		case r.owner == 0 && claimable(r, now):
			unowned = append(unowned, r)
		case st.stale(r, now):
			stale = append(stale, r)
		}
		// Pending work all the same: unowned (maybe backing off), or owned
		// by a worker with a row.
		if r.available > r.position && !r.failed && (r.owner == 0 || st.workerRows[r.owner] != nil) {
			pending = true
		}
	}
	capN := max(max(l.LiveWorkers, 1)*maxPartitions-held, maxPartitions+1)
	// Each kind counted up to the cap, earliest claimable first, with its
	// pending items.
	counted := func(rows []*row) int {
		if len(rows) > capN {
			slices.SortStableFunc(rows, func(a, b *row) int { return cmp.Compare(a.leaseExp, b.leaseExp) })
			rows = rows[:capN]
		}
		for _, r := range rows {
			l.Backlog += max(0, r.available-r.position)
		}
		return len(rows)
	}
	claimableN := counted(unowned) + counted(stale)
	switch total := held + leavingLeases + claimableN; {
	case total > 0:
		l.Busy = min(max(l.LiveWorkers, 1)*maxPartitions, total)
	case pending:
		l.Busy = 1
	}
	l.Unclaimed = min(claimableN, maxPartitions+1)
	return l
}
