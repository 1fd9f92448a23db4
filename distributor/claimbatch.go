package distributor

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/batonhq/baton/internal/dberr"
	"github.com/batonhq/baton/internal/taskstore"
)

// A partition nobody owns (never owned, or released) needs no confirmation,
// so its claim shares a transaction with its first batch (claimgroup.go,
// through the pipeline of txn.go): claim compare-and-set, output,
// checkpoint, and in lock mode, when that batch catches up, the release.
// Whatever fails before the commit rolls everything back: the partition is
// as the candidate read saw it, claimable by anyone. This file keeps what
// the worker remembers between such claims (candidates lost to other
// workers, transactions of its own given up mid-statement) and the
// fall-back after a rollback: a claim of its own, without the batch.

// lostClaim is a candidate lost to another worker's claim transaction.
type lostClaim struct {
	version int64
	at      time.Time
}

// noteLost records candidates lost at their fence, to be skipped for a
// while (skipLost), except those lost to this worker's own dying
// transaction (d.dying), which are tried again at the next poll. It
// reports how many were lost to other workers. Called with d.mu.
func (d *Distributor) noteLost(cands []taskstore.Candidate) int {
	now := d.cfg.Clock.Now()
	n := 0
	for _, c := range cands {
		delete(d.claiming, c.Key)
		if until, ok := d.dying[c.Key]; ok {
			if now.Before(until) {
				continue
			}
			delete(d.dying, c.Key)
		}
		d.lostClaims[c.Key] = lostClaim{version: c.Version, at: now}
		n++
	}
	return n
}

// markDying records that this worker abandoned the claim transaction of
// cands mid-statement: until the server has noticed (by its statement
// timeout at the latest, StaleAfter/2 as ConnectionLimits recommends, or
// the lease's length if the embedder set none lower), a fence finding
// their rows locked is not another worker's doing.
func (d *Distributor) markDying(cands []taskstore.Candidate) {
	until := d.cfg.Clock.Now().Add(d.cfg.StaleAfter)
	d.mu.Lock()
	defer d.mu.Unlock()
	for k, t := range d.dying {
		if !t.After(d.cfg.Clock.Now()) {
			delete(d.dying, k)
		}
	}
	for _, c := range cands {
		d.dying[c.Key] = until
	}
}

// skipLost drops the candidates recently lost at the same version, and
// forgets lost candidates no longer read or moved on. Called with d.mu.
func (d *Distributor) skipLost(cands []taskstore.Candidate) []taskstore.Candidate {
	now := d.cfg.Clock.Now()
	keep := make(map[string]lostClaim, len(d.lostClaims))
	out := slices.DeleteFunc(cands, func(c taskstore.Candidate) bool {
		l, ok := d.lostClaims[c.Key]
		if !ok || l.version != c.Version || now.Sub(l.at) >= d.cfg.StaleAfter {
			return false
		}
		keep[c.Key] = l
		return true
	})
	d.lostClaims = keep
	return out
}

// errClaimLost: another worker claimed the candidate first.
var errClaimLost = taskstore.ErrClaimLost

// errClaimBusy: the claim's compare-and-set found the fenced row locked by
// another transaction (a producer adding work, a load: FOR NO KEY UPDATE,
// which the fence's FOR KEY SHARE lets through) and skipped it. No other
// worker claimed it: while the fence holds, nobody can change its version.
var errClaimBusy = errors.New("the fenced row was locked by another transaction at the claim's compare-and-set")

// claimAlone claims c with a committed claim of its own after its combined
// transaction rolled back, and runs it as a claimed partition; with cause
// set, that run records the failure first.
func (d *Distributor) claimAlone(c taskstore.Candidate, cause error) {
	ctx, cancel := context.WithTimeout(d.base, d.cfg.StaleAfter/2)
	defer cancel()
	sent := d.cfg.Clock.Now()
	won, err := d.claimTraced(ctx, []taskstore.Candidate{c})
	if err != nil && dberr.UnknownOutcome(err) {
		won, err = d.resolveClaims([]taskstore.Candidate{c})
	}
	if err != nil || len(won) == 0 {
		d.unreserve(c)
		if err != nil {
			level := slog.LevelWarn
			if dberr.Transient(err) {
				level = slog.LevelDebug // an outage, said once by the heartbeat's failures
			}
			d.log.Log(ctx, level, "could not claim a partition after its first batch failed; it stays claimable",
				d.cfg.KeyAttr, c.Key, "error", err, "batch_error", cause)
		} else {
			d.emit(Event{Kind: EventClaimLost, Items: 1})
		}
		d.wake()
		return
	}
	d.reportClaim(won[0])
	d.startHeld(won[0], sent, false, cause, true)
}
