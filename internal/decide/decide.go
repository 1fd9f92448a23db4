// Package decide holds the pure decisions of the work-distribution
// protocol: how many partitions a worker holds and hands back (the fair
// share), which candidates it tries to claim, when a row counts as stale
// and a takeover as confirmed, how long a heartbeat leaves a lease alone,
// and how long a failure backs off. Package distributor and package
// heartbeat make these decisions through it, and so does the simulator
// (internal/sim), so the model checks the rules the workers run rather
// than a copy of them.
//
// Every function here is a function of its arguments alone: no clock, no
// database, no state. Times are durations (what is left, how long
// something has lasted), so a caller on the real clock and one on a
// virtual clock pass the same values.
package decide

import (
	"cmp"
	"github.com/batonhq/baton/internal/leaseinfo"
	"slices"
	"time"

	"github.com/batonhq/baton/internal/taskstore"
)

// Share is a fair-share decision: the share, and what to claim or hand
// back.
type Share struct {
	// Share is how many partitions the worker may hold: ceil(busy / live
	// workers), at least 1, at most MaxPartitions; and no more than it
	// holds once its held backlog is its share of all pending items
	// (ceil(backlog / live workers)).
	Share int
	// Claim is how many more unowned partitions the share allows.
	Claim int
	// HandBack is how many of the newest claims to hand back because the
	// worker holds more than its share and someone else will take them.
	HandBack int
	// HandBackIdle is how many caught-up partitions a leader at capacity
	// hands back so that waiting work nobody has room for can be claimed.
	HandBackIdle int
	// Overflow: work is unclaimed and no other live worker wants more, so
	// it may be claimed beyond the share, up to MaxPartitions, once this
	// has lasted a lease's length (OverflowAllowed).
	Overflow bool
}

// PlanShare decides the fair share from the load read by
// taskstore.Store.FairShareLoad and the worker's held partitions (not
// counting those already being handed back; idle of them caught up and
// waiting for work, in leader mode).
func PlanShare(load taskstore.Load, held, idle int, leader bool, maxPartitions int) Share {
	p := Share{Share: maxPartitions}
	if load.LiveWorkers > 1 {
		p.Share = min(p.Share, max(1, (load.Busy+load.LiveWorkers-1)/load.LiveWorkers))
		// Weighted by backlog: a worker whose partitions already hold its
		// share of all pending items claims no more, so that the holder
		// of a hot segment does not also take its count-share of small
		// partitions. It keeps what it holds (backlog never hands a
		// partition back, so none bounces between workers), and work no
		// other worker wants is still taken by overflow.
		p.Share = BacklogShare(p.Share, held, load.SelfBacklog, load.Backlog-load.SelfBacklog, load.LiveWorkers)
	}
	p.Claim = max(0, p.Share-held)
	// Hand back only what another worker will take: there is nothing
	// unclaimed left for it, and it said (its heartbeat's Wanted) that it
	// wants more. A live worker that cannot take more (at its own
	// MaxPartitions, or not claiming at all) wants nothing, so nothing is
	// handed back to sit unclaimed. Otherwise keep them and avoid needless
	// handoffs.
	if surplus := held - p.Share; surplus > 0 && load.Unclaimed == 0 && load.Wanted > 0 {
		p.HandBack = min(surplus, load.Wanted)
		return p
	}
	// Work waiting that no other worker wants: it must not wait for a
	// worker that will never take it.
	p.Overflow = load.Unclaimed > 0 && load.Wanted == 0 && held < maxPartitions
	// A leader at capacity must not sit on caught-up partitions while
	// claimable work waits that nobody has room for.
	if leader && load.Unclaimed > 0 && held >= p.Share {
		p.HandBackIdle = min(idle, load.Unclaimed)
	}
	return p
}

// BacklogShare is share as the worker's own backlog now bounds it: no
// more than the held partitions once self, the items they have pending,
// is its share of all pending items (others', from the last load, and
// self) among live workers. A worker learns its own backlog at each claim
// and commit, sooner than a load read, so that a claim of a hot segment
// stops it claiming at once.
func BacklogShare(share, held int, self, others int64, live int) int {
	if live > 1 && held > 0 && BacklogServed(self, others+self, live) {
		return min(share, held)
	}
	return share
}

// BacklogServed reports whether a worker holding self pending items holds
// its share of backlog pending items among live workers: ceil(backlog /
// live), and more than nothing.
func BacklogServed(self, backlog int64, live int) bool {
	if backlog <= 0 || live < 1 {
		return false
	}
	return self >= (backlog+int64(live)-1)/int64(live)
}

// OverflowAllowed reports whether work may be claimed beyond the share:
// the share's Overflow has held for lasted, and only once that is a
// lease's length (staleAfter) does it count. A live worker below its
// share says so by a heartbeat within that time, however starved its
// machine, and takes the work first.
func OverflowAllowed(overflow bool, lasted, staleAfter time.Duration) bool {
	return overflow && lasted >= staleAfter
}

// Wanted is how many more partitions a worker occupying occupied (held
// and being claimed) asks for: want within its share, room within
// MaxPartitions. With overflow allowed it wants all its room. While it is
// handing partitions back it wants none: claiming then would churn.
func Wanted(share, maxPartitions, occupied int, overflow, handingBack bool) (want, room int) {
	if handingBack {
		return 0, 0
	}
	room = maxPartitions - occupied
	if overflow {
		return room, room
	}
	return min(min(share, maxPartitions)-occupied, room), room
}

// StaleReadLimit is how many stale candidates a claim round reads, for
// room partitions.
func StaleReadLimit(room int) int { return 4*room + 8 }

// ReadHead reports whether a claim round that read stale stale candidates
// also reads the head of the claimable index: when it wants unowned
// partitions and the stale ones do not fill its room.
func ReadHead(want, stale, room int) bool { return want > 0 && stale < room }

// HeadReadLimit is how many candidates a claim round reads from the head
// of the claimable index: four times what it wants and some, plus those
// it knows to be in flight there (its own claims with their first batch
// and those it lost to others, which it skips), widened by twice
// MaxPartitions so that picks spread beyond rows another worker is
// claiming.
func HeadReadLimit(want, inFlight, maxPartitions int) int {
	return 4*want + 8 + inFlight + 2*maxPartitions
}

// StaleFirst orders shuffled candidates stably so that a dead worker's
// partitions (owned) come before unowned ones: their work has started and
// was interrupted, and PickClaims takes them first.
func StaleFirst[C any](cands []C, owned func(C) bool) {
	slices.SortStableFunc(cands, func(a, b C) int {
		switch oa, ob := owned(a), owned(b); {
		case oa == ob:
			return 0
		case oa:
			return -1
		}
		return 1
	})
}

// WithinBacklogShare is cands without the shared candidates (those
// exempt does not pick out) that would take a worker holding self pending
// items of such partitions away from its part of them: ceil((self +
// others, those the other workers hold, + the shared candidates' backlog)
// / live) items in all. Candidates are kept in order while each brings it
// no further from its part than it was without (at least half of the
// candidate is still below the part), so that two workers sharing equal
// segments end up with as many each, or one more, rather than the first
// to look rounding its part up by a whole segment, and of two workers
// holding as much, both try for the last one (one of them wins it)
// rather than neither. A worker that holds none keeps at least the
// first, however large, and one at or above its part keeps none. Exempt
// candidates are all kept. With one live worker, or no backlog known,
// cands is returned as it is. So two workers that find the segments of a
// split partition share them by items instead of the first to look
// taking as many as it has room for, and a worker takes more once its own
// run low.
func WithinBacklogShare[C any](cands []C, exempt func(C) bool, backlog func(C) int64, self, others int64, live int) []C {
	if live < 2 {
		return cands
	}
	var seen int64
	for _, c := range cands {
		if !exempt(c) {
			seen += max(0, backlog(c))
		}
	}
	if seen == 0 {
		return cands
	}
	left := (self+max(0, others)+seen+int64(live)-1)/int64(live) - self
	out := make([]C, 0, len(cands))
	first := true
	for _, c := range cands {
		if exempt(c) {
			out = append(out, c)
			continue
		}
		b := max(0, backlog(c))
		if left > 0 && (first && self == 0 || 2*left >= b) {
			out = append(out, c)
			left -= b
			first = false
		}
	}
	return out
}

// PickClaims chooses the candidates to claim in one round: a dead
// worker's partitions (owned) up to room, whatever the share, unowned ones
// up to want within room. It returns the choice and the candidates left
// for another round.
func PickClaims[C any](cands []C, owned func(C) bool, want, room int) (try, rest []C) {
	for _, c := range cands {
		switch {
		case len(try) >= room:
			rest = append(rest, c)
		case owned(c):
			try = append(try, c)
		case want > 0:
			try = append(try, c)
			want--
		default:
			rest = append(rest, c)
		}
	}
	return try, rest
}

// PickRiders chooses, from the candidates a round left (rest of
// PickClaims), the riders of its claim groups: unowned partitions (those
// eligible picks out) whose pending items, as read, fit a member's bound
// (memberItems), at most n of them and at most items pending in all. A
// rider is claimed and processed in a group beyond the worker's room
// (MaxPartitions), because its first batch should finish it and release
// it with the commit; one that does not finish is released anyway, so it
// is never held. It returns the riders and the candidates left, in their
// order.
func PickRiders[C any](cands []C, eligible func(C) bool, backlog func(C) int64, n int, memberItems, items int64) (riders, rest []C) {
	for _, c := range cands {
		if b := backlog(c); len(riders) < n && eligible(c) && b > 0 && b <= memberItems && b <= items {
			riders = append(riders, c)
			items -= b
			continue
		}
		rest = append(rest, c)
	}
	return riders, rest
}

// Live reports whether a worker counts as live: its registration has
// time left and it has not stopped.
func Live(registrationLeft time.Duration, stopped bool) bool {
	return registrationLeft > 0 && !stopped
}

// Claimable reports whether a row may be claimed at all: it has pending
// work, is not quarantined, and its lease (or back-off) has ended.
// Claim's compare-and-set requires this and nothing about the owner.
func Claimable(pending, quarantined bool, leaseLeft time.Duration) bool {
	return pending && !quarantined && leaseLeft <= 0
}

// Stale reports whether another worker may take an owned row over: it is
// claimable (Claimable) and its owner is not live. A row whose lease
// ended while its owner is live is not stale: that owner's next heartbeat
// hands it back (HandBack), and it is then claimable as an unowned row.
func Stale(claimable, ownerLive bool) bool { return claimable && !ownerLive }

// HandBack reports whether a heartbeat hands back one of its own worker's
// rows: one it does not list (no partition loop of the worker holds it)
// whose lease has ended.
func HandBack(listed bool, leaseLeft time.Duration) bool { return !listed && leaseLeft <= 0 }

// RenewBelow is the lease time left below which a heartbeat rewrites a
// lease; one with more left is checked but not rewritten. It is
// staleAfter − 2 × heartbeat, so a lease is rewritten about every third
// beat and has at least that much left after any successful heartbeat, but
// never less than safetyMargin + 2 × heartbeat, so that the local deadline
// always lies two beats beyond a successful one.
func RenewBelow(staleAfter, heartbeat, safetyMargin time.Duration) time.Duration {
	return max(staleAfter-2*heartbeat, safetyMargin+2*heartbeat)
}

// Rewrite reports whether a heartbeat with threshold renewBelow rewrites a
// lease with left to run; otherwise the lease comes back Fresh.
func Rewrite(left, renewBelow time.Duration) bool { return left < renewBelow }

// LeaseLeft is how long a lease has left by the database clock after a
// renewal r by a heartbeat whose rewrites last ttl: ttl if it rewrote the
// lease, what the database reported if it only checked it (Fresh) or
// could not lock it (Locked).
func LeaseLeft(r leaseinfo.Renewal, ttl time.Duration) time.Duration {
	if r.Fresh || r.Locked {
		return r.Remaining
	}
	return ttl
}

// DeadlineIn is how long after sending a successful renewal the local
// deadline of a lease with left to run falls: left minus the safety
// margin. Zero or less means it has passed.
func DeadlineIn(left, safetyMargin time.Duration) time.Duration { return left - safetyMargin }

// Confirmed reports whether a takeover that has survived streak
// consecutive successful heartbeats may be processed.
func Confirmed(streak, confirm int) bool { return streak >= confirm }

// Backoff is base doubled per earlier failure, capped at limit: the delay
// before a failed claim round is retried (failures: consecutive failed
// rounds before this one) and a failed partition's back-off (failures: its
// attempts before this failure; taskstore.Store.Fail computes the same in
// SQL).
func Backoff(base, limit time.Duration, failures int) time.Duration {
	d := base
	for ; failures > 0 && d < limit; failures-- {
		d *= 2
	}
	return min(d, limit)
}

// ClaimRetryDelay is how long a failed claim round waits before the next:
// its Backoff, at most a poll interval (the work it was looking for is
// still waiting).
func ClaimRetryDelay(base, limit, poll time.Duration, failures int) time.Duration {
	return min(Backoff(base, limit, failures), poll)
}

// Quarantine reports whether a failure that brings a partition's failed
// attempts to attempts quarantines it.
func Quarantine(attempts, maxAttempts int) bool { return attempts >= maxAttempts }

// RetryTransient reports whether a batch that failed with a transient
// error, after retries such retries already, is retried under the same
// lease rather than recorded as a failure.
func RetryTransient(retries, maxAttempts int) bool { return retries < maxAttempts }

// Newest orders held partitions for hand-back, newest claim first: they
// have the least progress to lose.
func Newest[H any, T interface{ Compare(T) int }](held []H, claimedAt func(H) T) {
	slices.SortStableFunc(held, func(a, b H) int { return claimedAt(b).Compare(claimedAt(a)) })
}

// NewestDur is Newest for claim times kept as durations (a virtual clock).
func NewestDur[H any](held []H, claimedAt func(H) time.Duration) {
	slices.SortStableFunc(held, func(a, b H) int { return cmp.Compare(claimedAt(b), claimedAt(a)) })
}

// StaleSighting is when a worker first saw a dead worker's partition, at
// the version it read, on its clock (T: a time, or a virtual clock's
// duration).
type StaleSighting[T any] struct {
	Version int64
	At      T
}

// SightStale is the bookkeeping of the wait before a dead worker's
// partitions are taken beyond the share: given the sightings so far, the
// stale rows a claim round found now (keys and the versions read), the
// time now and how long ago a time was (since), it returns the sightings
// to keep (the rows found now, each first seen now unless seen before at
// the same version), those to take beyond the share (TakeBeyondShare
// after wait), and those seen for the first time.
func SightStale[K comparable, T any](prev map[K]StaleSighting[T], keys []K, versions []int64, now T,
	since func(T) time.Duration, wait time.Duration) (seen map[K]StaleSighting[T], beyond, first map[K]bool) {
	seen = make(map[K]StaleSighting[T], len(keys))
	beyond, first = map[K]bool{}, map[K]bool{}
	for i, k := range keys {
		s, ok := prev[k]
		if !ok || s.Version != versions[i] {
			s = StaleSighting[T]{Version: versions[i], At: now}
			first[k] = true
		}
		seen[k] = s
		if TakeBeyondShare(since(s.At), wait) {
			beyond[k] = true
		}
	}
	return seen, beyond, first
}

// TakeBeyondShare reports whether a worker takes a dead worker's
// partition beyond its fair share (up to MaxPartitions) once it has seen
// it waiting for waited: after wait, during which the other live workers
// may take it (their part of the takeover); at once when wait is negative
// (takeovers not spread).
func TakeBeyondShare(waited, wait time.Duration) bool { return wait < 0 || waited >= wait }
