// Package keepalive is baton's renewal service: it keeps a worker's
// leases alive as package heartbeat documents. The distributor, package
// leader and the scheduler use it.
//
// Give New the storage of the leases (a Renewer) and Start the service;
// Track each lease as soon as it is claimed, process its partition only
// once Confirmed is closed and only under the lease's Context, which ends
// when the lease is lost or expires (with heartbeat's causes), and Release
// it when done. Renewer.Renew renews the worker and all the leases with one
// statement; Renewer.Inspect re-reads them to resolve a renewal whose
// outcome is unknown.
package keepalive

import (
	"cmp"
	"context"
	"fmt"
	"github.com/batonhq/baton/internal/leaseinfo"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/batonhq/baton/heartbeat"
	"github.com/batonhq/baton/internal/dberr"
	"github.com/batonhq/baton/internal/decide"
	"github.com/batonhq/baton/partition"
)

// Renewer is the storage the service needs.
type Renewer interface {
	// Renew renews the worker and leases in one statement and returns those
	// still held; a renewed lease lasts StaleAfter from the database's
	// now(), one returned Locked or Fresh the Remaining it reports.
	Renew(ctx context.Context, leases []partition.Lease) ([]leaseinfo.Renewal, error)
	// Inspect re-reads leases, returning those still held with their
	// remaining time by the database clock.
	Inspect(ctx context.Context, leases []partition.Lease) ([]leaseinfo.Owned, error)
}

// Defaults.
const (
	IntervalDefault   = heartbeat.IntervalDefault
	StaleAfterDefault = heartbeat.StaleAfterDefault
	ConfirmDefault    = heartbeat.ConfirmDefault
	KeyAttrDefault    = "partition_key"
)

// Config configures a Service.
type Config struct {
	// Interval between renewals. Defaults to IntervalDefault.
	Interval time.Duration
	// StaleAfter is the lease length. Defaults to StaleAfterDefault.
	StaleAfter time.Duration
	// SafetyMargin is how long before the lease's end, by the local clock,
	// processing stops without a renewal. Defaults to the larger of
	// Interval/2 and StaleAfter/5.
	SafetyMargin time.Duration
	// Confirm is how many consecutive renewals a lease that needs
	// confirmation must survive before Confirmed() closes. Defaults to
	// ConfirmDefault.
	Confirm int
	// Clock is the local clock. Defaults to the real clock.
	Clock clockwork.Clock
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// OnBeat, if set, is called after every renewal attempt with its
	// outcome, latency and the number of leases renewed.
	OnBeat func(err error, latency time.Duration, renewed int)
	// KeyAttr is the log attribute name for partition keys. Defaults to
	// KeyAttrDefault.
	KeyAttr string
}

func (c *Config) setDefaults() {
	c.Interval = cmp.Or(c.Interval, IntervalDefault)
	c.StaleAfter = cmp.Or(c.StaleAfter, StaleAfterDefault)
	c.SafetyMargin = cmp.Or(c.SafetyMargin, max(c.Interval/2, c.StaleAfter/5))
	c.Confirm = cmp.Or(c.Confirm, ConfirmDefault)
	c.KeyAttr = cmp.Or(c.KeyAttr, KeyAttrDefault)
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports impossible combinations. The lease must outlive several
// renewal intervals, and the local deadline must leave room for at least
// one renewal.
func (c Config) Validate() error {
	c.setDefaults()
	switch {
	case c.Interval <= 0:
		return fmt.Errorf("heartbeat interval must be positive, got %s", c.Interval)
	case c.StaleAfter < 3*c.Interval:
		return fmt.Errorf("stale-after (%s) must be at least 3 × heartbeat (%s) so a lease survives a missed beat", c.StaleAfter, c.Interval)
	case c.SafetyMargin <= 0 || c.SafetyMargin > c.StaleAfter-2*c.Interval:
		// The local deadline must leave room for two renewals, or a lease
		// can be dropped before it is ever confirmed, again and again.
		return fmt.Errorf("safety margin (%s) must be positive and at most stale-after − 2 × heartbeat (%s)", c.SafetyMargin, c.StaleAfter-2*c.Interval)
	case c.Confirm < 1:
		return fmt.Errorf("confirm must be at least 1, got %d", c.Confirm)
	}
	return nil
}

// Service renews leases. Start it once; Stop is idempotent.
type Service struct {
	r   Renewer
	cfg Config

	mu     sync.Mutex
	leases map[string]*Lease

	wake    chan struct{} // asks the loop for an immediate renewal
	cancel  context.CancelFunc
	stopped chan struct{}
	once    sync.Once
}

// New returns a service; cfg is validated.
func New(r Renewer, cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	return &Service{r: r, cfg: cfg, leases: map[string]*Lease{}, wake: make(chan struct{}, 1)}, nil
}

// Lease is a tracked lease.
type Lease struct {
	partition.Lease
	svc       *Service
	ctx       context.Context
	cancel    context.CancelCauseFunc
	confirmed chan struct{}
	work      chan struct{}
	// releasing: the owner is releasing the lease in a transaction of its
	// own, so a renewal that no longer finds it is that release, not a loss.
	releasing atomic.Bool
	// paused: the last renewal found the partition paused.
	paused atomic.Bool

	// guarded by svc.mu
	streak   int
	deadline *deadline
}

type deadline struct {
	timer clockwork.Timer
}

// SetReleasing(true) tells the service that the owner is about to release
// the lease in its own transaction (a batch that caught up hands its
// partition back in its commit). A renewal that no longer finds the lease
// then leaves it alone, neither renewed nor reported lost, for the owner to
// Release: the renewal waits on the row lock of that transaction and may see
// its commit before the owner has read the commit's reply, which ending the
// lease's context would interrupt. The local deadline still runs. The owner
// clears the mark if that transaction did not commit, and a renewal that
// misses the lease after that reports it lost.
func (l *Lease) SetReleasing(on bool) { l.releasing.Store(on) }

// Context is cancelled, with heartbeat.ErrOwnershipLost, heartbeat.ErrLeaseExpired or
// heartbeat.ErrReleased as its cause, when the lease ends.
func (l *Lease) Context() context.Context { return l.ctx }

// Confirmed is closed once the lease may be processed.
func (l *Lease) Confirmed() <-chan struct{} { return l.confirmed }

// IsConfirmed reports whether Confirmed() is closed.
func (l *Lease) IsConfirmed() bool { return isClosed(l.confirmed) }

// Work receives a value when a renewal reports pending work (available >
// position) on the partition, or that it is paused.
func (l *Lease) Work() <-chan struct{} { return l.work }

// Paused reports whether the last renewal found the partition, or its
// kind, paused: its owner releases it at the next batch boundary.
func (l *Lease) Paused() bool { return l.paused.Load() }

// Streak is the number of consecutive successful renewals since the claim.
func (l *Lease) Streak() int {
	l.svc.mu.Lock()
	defer l.svc.mu.Unlock()
	return l.streak
}

// Track starts renewing lease. claimSent is the local time just before the
// claim statement was sent: the lease runs StaleAfter from the database's
// now() at claim, which is no earlier. needConfirm says whether processing
// must wait for Confirm renewals. The lease's context derives from parent.
func (s *Service) Track(parent context.Context, l partition.Lease, claimSent time.Time, needConfirm bool) *Lease {
	ctx, cancel := context.WithCancelCause(parent)
	tl := &Lease{Lease: l, svc: s, ctx: ctx, cancel: cancel, confirmed: make(chan struct{}), work: make(chan struct{}, 1)}
	if !needConfirm {
		close(tl.confirmed)
	}
	s.mu.Lock()
	if old, ok := s.leases[l.Key]; ok {
		s.endLocked(old, heartbeat.ErrOwnershipLost)
	}
	s.leases[l.Key] = tl
	s.extendLocked(tl, claimSent, s.cfg.StaleAfter)
	s.mu.Unlock()
	return tl
}

// Release stops tracking a lease and cancels its context with heartbeat.ErrReleased.
func (s *Service) Release(l *Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endLocked(l, heartbeat.ErrReleased)
}

// Tracked returns the leases tracked now.
func (s *Service) Tracked() []*Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Lease, 0, len(s.leases))
	for _, l := range s.leases {
		out = append(out, l)
	}
	return out
}

func (s *Service) endLocked(l *Lease, cause error) {
	if cur, ok := s.leases[l.Key]; ok && cur == l {
		delete(s.leases, l.Key)
	}
	if l.deadline != nil {
		l.deadline.timer.Stop()
		l.deadline = nil
	}
	l.cancel(cause)
}

// extendLocked moves the local deadline to sent + remaining − margin.
func (s *Service) extendLocked(l *Lease, sent time.Time, remaining time.Duration) {
	at := sent.Add(decide.DeadlineIn(remaining, s.cfg.SafetyMargin))
	wait := at.Sub(s.cfg.Clock.Now())
	if l.deadline != nil {
		l.deadline.timer.Stop()
	}
	if wait <= 0 {
		s.endLocked(l, heartbeat.ErrLeaseExpired)
		s.cfg.Logger.Warn("lease expired locally", "event", "lost", s.cfg.KeyAttr, l.Key, "version", l.Version)
		return
	}
	l.deadline = &deadline{timer: s.cfg.Clock.AfterFunc(wait, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if cur, ok := s.leases[l.Key]; ok && cur == l && l.ctx.Err() == nil {
			s.cfg.Logger.Warn("lease expired locally: no successful heartbeat in time, stopping",
				"event", "lost", s.cfg.KeyAttr, l.Key, "version", l.Version)
			s.endLocked(l, heartbeat.ErrLeaseExpired)
		}
	})}
}

// Start begins renewing in the background and returns at once.
func (s *Service) Start(ctx context.Context) error {
	ctx, s.cancel = context.WithCancel(ctx)
	s.stopped = make(chan struct{})
	go s.loop(ctx)
	return nil
}

// Stop ends renewals and waits for the loop to exit. Leases still tracked
// keep their contexts and deadlines; the caller releases them.
func (s *Service) Stop() {
	s.once.Do(func() {
		if s.cancel != nil {
			s.cancel()
			<-s.stopped
		}
	})
}

// Now asks for a renewal as soon as possible (e.g. right after a claim,
// to start the confirmation streak without waiting a full interval).
func (s *Service) Now() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// lockedRetries is how many times, after a renewal that skipped leases
// whose rows another transaction held, the loop tries again before the
// next beat, lockedRetries+1 apart within the interval. A row locked for
// a moment (the owner's own batch, between its checkpoint's update and
// its commit: most of the time when batches of a record or two follow
// each other) is then renewed a moment later rather than a beat later; a
// lease that needs renewing has only a beat or two left to spare at tight
// timings, so two skips in a row cost it. A row locked for long (a load
// adding work) costs lockedRetries more renewals a beat while it lasts.
const lockedRetries = 3

func (s *Service) loop(ctx context.Context) {
	defer close(s.stopped)
	ticker := s.cfg.Clock.NewTicker(s.cfg.Interval)
	defer ticker.Stop()
	var retry <-chan time.Time
	retries := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.Chan():
			retries = 0
		case <-s.wake:
		case <-retry:
		}
		retry = nil
		if s.beat(ctx) && retries < lockedRetries {
			retries++
			retry = s.cfg.Clock.After(s.cfg.Interval / (lockedRetries + 1))
		}
	}
}

// beat performs one renewal of every tracked lease now. The loop calls it
// every Interval (and sooner after a renewal that skipped locked rows). It
// reports whether the renewal skipped any lease because another
// transaction held its row.
func (s *Service) beat(ctx context.Context) (skippedLocked bool) {
	s.mu.Lock()
	snapshot := make([]*Lease, 0, len(s.leases))
	leases := make([]partition.Lease, 0, len(s.leases))
	for _, l := range s.leases {
		snapshot = append(snapshot, l)
		leases = append(leases, l.Lease)
	}
	s.mu.Unlock()

	sent := s.cfg.Clock.Now()
	// Bound the renewal so a hung connection cannot stall the loop; it may
	// take longer than an interval and still save every lease.
	timeout := max(s.cfg.Interval, s.cfg.StaleAfter/4)
	rctx, cancel := context.WithTimeout(ctx, timeout)
	renewals, err := s.r.Renew(rctx, leases)
	cancel()
	latency := s.cfg.Clock.Since(sent)

	if err != nil && ctx.Err() == nil && dberr.UnknownOutcome(err) {
		s.cfg.Logger.Warn("heartbeat outcome unknown, re-reading leases", "error", err, "leases", len(leases))
		sent2 := s.cfg.Clock.Now()
		ictx, cancel := context.WithTimeout(ctx, timeout)
		held, ierr := s.r.Inspect(ictx, leases)
		cancel()
		if ierr == nil {
			s.applyInspect(snapshot, held, sent2)
			if s.cfg.OnBeat != nil {
				s.cfg.OnBeat(err, latency, len(held))
			}
			return
		}
		err = fmt.Errorf("%w (re-read also failed: %v)", err, ierr)
	}
	if err != nil {
		if s.cfg.OnBeat != nil {
			s.cfg.OnBeat(err, latency, 0)
		}
		if ctx.Err() != nil {
			return
		}
		s.cfg.Logger.Warn("heartbeat failed", "error", err, "leases", len(leases), "latency_ms", latency.Milliseconds())
		s.mu.Lock()
		for _, l := range snapshot {
			if !isClosed(l.confirmed) {
				l.streak = 0
			}
		}
		s.mu.Unlock()
		return
	}
	byKey := make(map[partition.Lease]leaseinfo.Renewal, len(renewals))
	renewed := 0
	for _, r := range renewals {
		byKey[r.Lease] = r
		if !r.Locked {
			renewed++
		}
	}
	if s.cfg.OnBeat != nil {
		s.cfg.OnBeat(nil, latency, renewed)
	}
	skipped := len(renewals) - renewed
	if skipped > 0 {
		s.cfg.Logger.Debug("heartbeat skipped leases whose rows another transaction holds; renewing them later",
			"skipped", skipped, "renewed", renewed)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range snapshot {
		if l.ctx.Err() != nil {
			continue
		}
		r, ok := byKey[l.Lease]
		if !ok && l.releasing.Load() {
			// Left to the owner, whose commit this renewal waited for:
			// cancelling the lease now could interrupt the reply to that
			// very commit.
			continue
		}
		if !ok {
			s.cfg.Logger.Warn("partition lost: heartbeat found it owned by another claim",
				"event", "lost", s.cfg.KeyAttr, l.Key, "version", l.Version)
			s.endLocked(l, heartbeat.ErrOwnershipLost)
			continue
		}
		l.paused.Store(r.Paused)
		if r.Locked {
			// Not renewed, not lost: the lease keeps what it has left, and
			// ends locally only if that runs out before a renewal.
			s.extendLocked(l, sent, r.Remaining)
			if !isClosed(l.confirmed) {
				l.streak = 0
			}
			continue
		}
		// A fresh lease was checked, not rewritten: its deadline follows
		// what it has left, never a renewal that did not happen.
		s.renewedLocked(l, sent, decide.LeaseLeft(r, s.cfg.StaleAfter))
		if r.Available > r.Position || r.Paused {
			select {
			case l.work <- struct{}{}:
			default:
			}
		}
	}
	return skipped > 0
}

func (s *Service) applyInspect(snapshot []*Lease, held []leaseinfo.Owned, sent time.Time) {
	byKey := make(map[partition.Lease]time.Duration, len(held))
	for _, h := range held {
		byKey[h.Lease] = h.Remaining
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range snapshot {
		if l.ctx.Err() != nil {
			continue
		}
		remaining, ok := byKey[l.Lease]
		if !ok && l.releasing.Load() {
			continue // left to the owner, as in Beat
		}
		if !ok {
			s.cfg.Logger.Warn("partition lost: re-read found it owned by another claim",
				"event", "lost", s.cfg.KeyAttr, l.Key, "version", l.Version)
			s.endLocked(l, heartbeat.ErrOwnershipLost)
			continue
		}
		// Still ours: whether or not the renewal applied, the database
		// says how long the lease has left.
		s.renewedLocked(l, sent, remaining)
	}
}

func (s *Service) renewedLocked(l *Lease, sent time.Time, remaining time.Duration) {
	s.extendLocked(l, sent, remaining)
	if l.ctx.Err() != nil {
		return
	}
	l.streak++
	if decide.Confirmed(l.streak, s.cfg.Confirm) && !isClosed(l.confirmed) {
		close(l.confirmed)
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
