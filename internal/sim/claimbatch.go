package sim

import (
	"maps"
	"slices"
	"time"
)

// ---- a claim with its first batch (distributor's claimTxn) ---------------

// claimRun is Distributor.runClaim for one candidate: claimed in
// the transaction of its first batch. Its context is a lease of its own,
// never renewed, that ends at StaleAfter − SafetyMargin from the start by
// the worker's clock (the transaction's timeout).
type claimRun struct {
	w       *worker
	c       candidate
	l       *lease
	conn    *conn
	rpc     *rpc
	sent    time.Duration
	epoch   int
	readPos int64
	avail   int64
	newPos  int64
	release bool
}

// lostClaim is a candidate lost at its fence, skipped while at the same
// version for StaleAfter (distributor's lostClaims).
type lostClaim struct {
	version int64
	at      time.Duration
}

// skipLost is Distributor.skipLost.
func (w *worker) skipLost(cands []candidate) []candidate {
	keep := map[int]lostClaim{}
	out := slices.DeleteFunc(cands, func(c candidate) bool {
		l, ok := w.lostClaims[c.key]
		if !ok || l.version != c.version || w.local()-l.at >= w.s.cfg.StaleAfter {
			return false
		}
		keep[c.key] = l
		return true
	})
	w.lostClaims = keep
	return out
}

func sortedKeys[V any](m map[int]V) []int { return slices.Sorted(maps.Keys(m)) }

func (w *worker) startClaimRun(c candidate) {
	s := w.s
	cr := &claimRun{w: w, c: c, sent: w.local(), epoch: w.suspendEpoch}
	w.claiming[c.key] = cr
	limit := s.cfg.StaleAfter - s.margin
	cr.l = &lease{leaseID: leaseID{c.key, c.version + 1}, w: w, confirmed: true,
		deadline: cr.sent + limit, renewEpoch: cr.epoch}
	w.after(limit, func() { cr.l.end("the claim transaction's deadline") })
	cr.conn = s.newConn(w)
	w.tracef("claiming %s with its first batch", c.leaseID)
	cr.call(&request{kind: reqFenceUnowned, owner: w.id, cand: c}, func(resp response) {
		if resp.err != errNone {
			cr.finish(resp.err, false)
			return
		}
		cr.readPos, cr.avail = resp.position, resp.available
		n := s.batchItems(min(int64(s.cfg.BatchSize), cr.avail-cr.readPos))
		cr.newPos = cr.readPos + n
		cr.release = cr.newPos >= cr.avail && w.releasesCaughtUp(c.key)
		work := s.workTime(n)
		procErr := s.rng.Float64() < s.cfg.Faults.ProcessorError
		cr.rpc = w.process(work, cr.l, func(r response) {
			cr.rpc = nil
			switch {
			case r.err != errNone:
				cr.finish(r.err, false)
			case procErr:
				s.res.Faults[FaultProcessorError]++
				cr.finish(errProcessor, false)
			default:
				cr.write()
			}
		})
	})
}

func (cr *claimRun) call(req *request, cb func(response)) {
	cr.rpc = cr.w.call(cr.conn, req, 0, cr.l, func(resp response) {
		cr.rpc = nil
		cb(resp)
	})
}

func (cr *claimRun) ctxErr() errKind {
	if cr.l.ended {
		return errCanceled
	}
	if cr.w.abandoned {
		return errAbandoned
	}
	return errNone
}

func (cr *claimRun) write() {
	if err := cr.ctxErr(); err != errNone {
		cr.finish(err, false)
		return
	}
	cr.w.checkWrite(cr.l, "a write")
	cr.call(&request{kind: reqWrite, from: cr.readPos + 1, to: cr.newPos}, func(resp response) {
		if resp.err != errNone {
			cr.finish(resp.err, false)
			return
		}
		cr.claimAdvance()
	})
}

func (cr *claimRun) claimAdvance() {
	if err := cr.ctxErr(); err != errNone {
		cr.finish(err, false)
		return
	}
	cr.w.checkWrite(cr.l, "the claim and checkpoint update")
	cr.call(&request{kind: reqClaimAdvance, newPos: cr.newPos, release: cr.release}, func(resp response) {
		if resp.err == errClaimLost {
			// Past its fence nobody else can claim the row: it was
			// locked (runClaim's errClaimBusy).
			cr.finish(errClaimBusy, false)
			return
		}
		if resp.err != errNone {
			cr.finish(resp.err, false)
			return
		}
		cr.commit()
	})
}

func (cr *claimRun) commit() {
	if err := cr.ctxErr(); err != errNone {
		cr.finish(err, false)
		return
	}
	cr.w.checkWrite(cr.l, "the commit")
	cr.call(&request{kind: reqCommit}, func(resp response) {
		switch {
		case resp.err == errNone:
			cr.finish(errNone, false)
		case cr.ctxErr() != errNone || !resp.err.unknownOutcome():
			cr.finish(resp.err, false)
		default:
			cr.resolve(resp.err)
		}
	})
}

// resolve is resolveCommit for the claim's transaction: applied if the row
// is at the claim's version (or the next, when it also released) at the
// batch's position.
func (cr *claimRun) resolve(commitErr errKind) {
	w := cr.w
	s := w.s
	deadline := w.local() + s.cfg.StaleAfter/2
	attempt := 0
	var try func()
	try = func() {
		left := deadline - w.local()
		if left <= 0 {
			cr.finish(commitErr, true)
			return
		}
		w.poolCall(&request{kind: reqProgress, key: cr.c.key}, left, nil, func(resp response) {
			if resp.err == errNone {
				v := cr.l.version
				if cr.release {
					v++
				}
				if resp.version == v && resp.position == cr.newPos {
					s.res.ResolvedCommits++
					cr.finish(errNone, false)
					return
				}
				if resp.version == cr.c.version {
					cr.finish(commitErr, false) // not applied: rolled back
					return
				}
				cr.finish(commitErr, true)
				return
			}
			attempt++
			if attempt >= 3 || deadline-w.local() <= s.cfg.Heartbeat/4 {
				cr.finish(commitErr, true)
				return
			}
			w.after(s.cfg.Heartbeat/4, try)
		})
	}
	try()
}

// finish is what runClaim does with the outcome. unknown: the commit
// may have applied.
func (cr *claimRun) finish(err errKind, unknown bool) {
	w := cr.w
	w.closeConn(cr.conn)
	cr.conn = nil
	expired := cr.l.ended && cr.l.cause == "the claim transaction's deadline"
	cr.l.end("claim transaction over")
	w.after(0, func() {
		done := func() {
			delete(w.claiming, cr.c.key)
			w.checkStopped()
		}
		switch {
		case err == errNone && cr.release:
			w.tracef("claimed, priced and released %s in one transaction", cr.l.leaseID)
			done()
			w.wake()
		case err == errNone:
			delete(w.claiming, cr.c.key)
			w.startPartition(claimed{cr.l.leaseID, false, cr.newPos, cr.avail}, cr.sent, cr.epoch)
		case err == errClaimBusy:
			done() // still unowned at its version: the next poll tries again
		case err == errClaimLost:
			w.lostClaims[cr.c.key] = lostClaim{cr.c.version, w.local()}
			done()
			w.wake()
		case unknown:
			done() // if it applied, the lease expires and is taken over
		case w.leaving || w.abandoned:
			done()
		case expired:
			cr.claimAlone(errNone)
		case err.transient() || err == errCanceled:
			done() // the next poll tries again
		default:
			cr.claimAlone(err)
		}
	})
}

// claimAlone is Distributor.claimAlone: after the claim's transaction
// rolled back, claim the candidate with a claim of its own; with cause
// set, the partition then records that failure first.
func (cr *claimRun) claimAlone(cause errKind) {
	w := cr.w
	sent, epoch := w.local(), w.suspendEpoch
	w.poolCall(&request{kind: reqClaim, owner: w.id, cands: []candidate{cr.c}}, w.s.cfg.StaleAfter/2, nil, func(resp response) {
		delete(w.claiming, cr.c.key)
		if resp.err != errNone || len(resp.won) == 0 {
			w.checkStopped()
			w.wake()
			return
		}
		w.startPartition(resp.won[0], sent, epoch)
		w.held[cr.c.key].failWith = cause
	})
}
