package schedule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/uptrace/bun"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/heartbeat"
	"github.com/batonhq/baton/internal/keepalive"
	"github.com/batonhq/baton/internal/leaseloop"
	"github.com/batonhq/baton/partition"
)

// ErrLockAtMostFor is the cancellation cause of a run that reached its
// job's LockAtMostFor.
var ErrLockAtMostFor = errors.New("run reached lock-at-most-for")

// ErrShutdown is the cancellation cause of a run still in progress when the
// scheduler's ShutdownTimeout ran out.
var ErrShutdown = errors.New("scheduler stopping")

// Defaults.
const (
	PollIntervalDefault    = time.Second
	ShutdownTimeoutDefault = 10 * time.Second
)

// Config configures a Scheduler.
type Config struct {
	// Schema is the PostgreSQL schema holding baton's tables. Defaults to
	// schema.Default ("baton").
	Schema string
	// InstanceID names this worker in the jobs' owner column and in
	// BATON_WORKER. Defaults to host name + "#" + a random suffix.
	InstanceID string
	// Heartbeat is the lease renewal interval. Defaults to
	// heartbeat.IntervalDefault.
	Heartbeat time.Duration
	// StaleAfter is the lease length: a job whose runner stops renewing is
	// taken over this long after its last renewal. Defaults to
	// heartbeat.StaleAfterDefault.
	StaleAfter time.Duration
	// Confirm is how many renewals a takeover of an abandoned run waits
	// before running the slot again, so a runner that was merely paused
	// notices first. Defaults to heartbeat.ConfirmDefault.
	Confirm int
	// PollInterval is the longest the scheduler waits between looks for
	// due jobs; it also wakes at the next slot. Defaults to
	// PollIntervalDefault.
	PollInterval time.Duration
	// ShutdownTimeout is how long a stop waits for runs in progress before
	// cancelling them. Defaults to ShutdownTimeoutDefault.
	ShutdownTimeout time.Duration
	// Resolve, if set, returns the function of a stored job that has none
	// registered (commands, built-ins); ok false leaves the job to other
	// workers. Without it only registered jobs run.
	Resolve func(d Definition) (fn RunFunc, ok bool)
	// Clock is the worker's clock, used only for waiting and for local
	// deadlines; slots come from the database clock. Defaults to the real
	// clock.
	Clock clockwork.Clock
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// OnRun, if set, is called after every run with the job's name, the
	// outcome (ok, failed, lost: the lease ended first, fenced: the
	// completion was refused, cancelled: stopped by a shutdown) and how
	// long the run took.
	OnRun func(job, outcome string, elapsed time.Duration)
}

func (c *Config) setDefaults() {
	if c.InstanceID == "" {
		c.InstanceID = leaseloop.InstanceID()
	}
	c.Heartbeat = cmpOr(c.Heartbeat, heartbeat.IntervalDefault)
	c.StaleAfter = cmpOr(c.StaleAfter, heartbeat.StaleAfterDefault)
	if c.Confirm == 0 {
		c.Confirm = heartbeat.ConfirmDefault
	}
	c.PollInterval = cmpOr(c.PollInterval, PollIntervalDefault)
	c.ShutdownTimeout = cmpOr(c.ShutdownTimeout, ShutdownTimeoutDefault)
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func (c Config) validate() error {
	if err := leaseloop.Validate(c.Schema, c.PollInterval, c.Heartbeat, c.StaleAfter, c.Confirm); err != nil {
		return err
	}
	if c.ShutdownTimeout < 0 {
		return fmt.Errorf("shutdown timeout must not be negative, got %s", c.ShutdownTimeout)
	}
	return nil
}

// Run is one run of a job: what its function gets.
type Run struct {
	// Job is the job's name.
	Job string
	// Slot is the due time this run is for, from the database clock. A
	// triggered run's slot is the time of the request.
	Slot time.Time
	// Fence is the fencing token: the job row's version, which grows with
	// every change of ownership. A resource that remembers the highest
	// token it has seen can refuse a stale runner.
	Fence int64
	// IdempotencyKey is job + "@" + slot: the same for every attempt at the
	// same slot, so side effects elsewhere can be made once.
	IdempotencyKey string
	// Worker is the running worker's instance id.
	Worker string
	// Triggered is true for a run requested by Trigger.
	Triggered bool
	// Takeover is true when this run repeats a slot whose previous runner
	// stopped renewing its lease before completing.
	Takeover bool

	sched *Scheduler
}

// Check locks the job row inside tx if this run still holds its job, and
// returns partition.ErrFenced otherwise. The lock is held until tx ends, so no other
// worker can take the job over between the check and the commit: a run's
// database writes made in tx after Check commit only while the run holds
// the job, like a batch behind a partition's fence.
func (r *Run) Check(ctx context.Context, tx bun.Tx) error {
	return r.sched.store.fence(ctx, tx, r.Job, r.Fence, r.Slot)
}

// Scheduler runs due jobs: registered ones and, through Config.Resolve,
// stored ones. Start it with Run.
type Scheduler struct {
	db    *dbconn.DB
	cfg   Config
	store *runStore
	hb    *keepalive.Service

	mu      sync.Mutex
	jobs    map[string]RunFunc // registered in code
	held    map[string]*heldJob
	running sync.WaitGroup
	wake    chan struct{}
}

type heldJob struct {
	lease   *keepalive.Lease
	running bool
	watched bool // a watchLeader goroutine waits for the lease's end
	cancel  context.CancelCauseFunc
}

// New returns a scheduler over db (from dbconn.Open or dbconn.Wrap, whose
// transactions carry its timeouts); cfg is validated.
func New(db *dbconn.DB, cfg Config) (*Scheduler, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("invalid scheduler config: %w", err)
	}
	s := &Scheduler{db: db, cfg: cfg, jobs: map[string]RunFunc{}, held: map[string]*heldJob{},
		wake: make(chan struct{}, 1)}
	s.store = &runStore{db: db, schema: cfg.Schema, owner: cfg.InstanceID, ttl: cfg.StaleAfter}
	hb, err := keepalive.New(leaseTable(db, cfg.Schema, cfg.InstanceID, cfg.StaleAfter), keepalive.Config{
		Interval: cfg.Heartbeat, StaleAfter: cfg.StaleAfter, Confirm: cfg.Confirm,
		Clock: cfg.Clock, Logger: cfg.Logger, KeyAttr: "job",
	})
	if err != nil {
		return nil, fmt.Errorf("invalid scheduler config: %w", err)
	}
	s.hb = hb
	return s, nil
}

// InstanceID is the owner name this scheduler claims jobs under.
func (s *Scheduler) InstanceID() string { return s.cfg.InstanceID }

// Register stores job's definition (as Store.Add) and runs it with job.Run on
// this scheduler. Register before Run.
func (s *Scheduler) Register(ctx context.Context, job Job) error {
	if job.Run == nil {
		return fmt.Errorf("job %s: no function", job.Name)
	}
	if err := NewStore(s.db, s.cfg.Schema).Add(ctx, job.Definition); err != nil {
		return err
	}
	s.mu.Lock()
	s.jobs[job.Name] = job.Run
	s.mu.Unlock()
	return nil
}

// Run looks for due jobs and runs them until ctx is cancelled; then it
// claims nothing more, lets runs in progress finish (ShutdownTimeout at
// most, then cancels them), and releases every job it holds. It returns
// nil after a graceful stop.
func (s *Scheduler) Run(ctx context.Context) error {
	life, stopLife := context.WithCancel(context.WithoutCancel(ctx))
	defer stopLife()
	if err := s.hb.Start(life); err != nil {
		return err
	}
	defer s.hb.Stop()
	s.cfg.Logger.Info("scheduler started", "event", "scheduler_started", "worker", s.cfg.InstanceID)

	_ = leaseloop.Poll(ctx, s.cfg.Clock, s.cfg.PollInterval, s.wake, func() (time.Duration, bool) {
		return s.round(ctx, life), false
	})
	s.shutdown()
	return nil
}

// round claims and starts every job due now and returns how long until the
// next slot due (negative: none known; the next look is after
// PollInterval).
func (s *Scheduler) round(ctx, life context.Context) time.Duration {
	names := s.runnable()
	if names != nil && len(names) == 0 {
		return -1
	}
	cands, next, err := s.store.candidates(ctx, names)
	if err != nil {
		if ctx.Err() == nil {
			s.cfg.Logger.Warn("looking for due jobs failed", "event", "error", "error", err)
		}
		return -1
	}
	for _, c := range cands {
		if ctx.Err() != nil {
			break
		}
		s.mu.Lock()
		h := s.held[c.name]
		busy := h != nil && h.running
		s.mu.Unlock()
		if busy {
			continue
		}
		fn, ok := s.function(ctx, c.name)
		if !ok {
			continue
		}
		sent := s.cfg.Clock.Now()
		cl, err := s.store.claim(ctx, c)
		if err != nil {
			if ctx.Err() == nil {
				s.cfg.Logger.Warn("claiming job failed", "event", "error", "job", c.name, "error", err)
			}
			continue
		}
		if cl == nil {
			continue // someone else was first
		}
		s.start(life, cl, fn, sent)
	}
	return next
}

// runnable returns the names this scheduler can run, or nil for all (when
// Resolve is set).
func (s *Scheduler) runnable() []string {
	if s.cfg.Resolve != nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.jobs))
	for n := range s.jobs {
		names = append(names, n)
	}
	return names
}

func (s *Scheduler) function(ctx context.Context, name string) (RunFunc, bool) {
	s.mu.Lock()
	fn, ok := s.jobs[name]
	s.mu.Unlock()
	if ok {
		return fn, true
	}
	if s.cfg.Resolve == nil {
		return nil, false
	}
	defs, err := definitions(ctx, s.db, s.cfg.Schema, name)
	if err != nil || len(defs) == 0 {
		return nil, false
	}
	return s.cfg.Resolve(defs[0])
}

// start tracks the claimed job's lease and runs it in the background.
func (s *Scheduler) start(life context.Context, cl *claimed, fn RunFunc, sent time.Time) {
	name := cl.def.Name
	s.mu.Lock()
	h := s.held[name]
	if h == nil || h.lease.Version != cl.version || h.lease.Context().Err() != nil {
		lease := s.hb.Track(life, partition.Lease{Key: name, Version: cl.version}, sent, cl.takeover)
		h = &heldJob{lease: lease}
		s.held[name] = h
	}
	h.running = true
	// The run ends with the lease; past the run's deadline the heartbeat
	// stops renewing it on purpose, so a loss then is the deadline's.
	runCtx, cancel := context.WithCancelCause(life)
	lease := h.lease
	stopWatch := context.AfterFunc(lease.Context(), func() {
		cause := context.Cause(lease.Context())
		if s.cfg.Clock.Since(sent) >= cl.remaining {
			cause = ErrLockAtMostFor
		}
		cancel(cause)
	})
	h.cancel = cancel
	s.running.Add(1)
	s.mu.Unlock()
	if cl.takeover {
		s.hb.Now()
	}

	r := &Run{
		Job: name, Slot: cl.slot, Fence: cl.version, Worker: s.cfg.InstanceID,
		IdempotencyKey: name + "@" + cl.slot.Format(time.RFC3339Nano),
		Triggered:      cl.triggered, Takeover: cl.takeover, sched: s,
	}
	// The run's deadline: lock-at-most-for from the claim, measured from
	// before the claim was sent, so it passes locally no later than on the
	// database.
	deadline := s.cfg.Clock.AfterFunc(cl.remaining-s.cfg.Clock.Since(sent), func() { cancel(ErrLockAtMostFor) })
	go func() {
		defer s.running.Done()
		defer deadline.Stop()
		defer stopWatch()
		defer cancel(nil)
		s.execute(runCtx, life, h, cl, fn, r, sent)
	}()
}

func (s *Scheduler) execute(ctx, life context.Context, h *heldJob, cl *claimed, fn RunFunc, r *Run, sent time.Time) {
	log := s.cfg.Logger.With("job", r.Job, "slot", r.Slot.Format(time.RFC3339Nano), "fence", r.Fence)
	if cl.takeover {
		// The previous runner may only be paused: wait until it has had
		// Confirm renewals' time to notice and stop.
		select {
		case <-h.lease.Confirmed():
		case <-ctx.Done():
			log.Warn("takeover of an abandoned run lost before confirmation", "event", "job_lost",
				"cause", context.Cause(ctx).Error())
			s.drop(r.Job, h)
			return
		}
	}
	log.Info("job run started", "event", "job_started", "triggered", r.Triggered, "takeover", r.Takeover)
	start := s.cfg.Clock.Now()
	err := safeRun(ctx, fn, r)
	elapsed := s.cfg.Clock.Since(start)
	cause := context.Cause(ctx)
	if ctx.Err() != nil && !errors.Is(cause, ErrShutdown) && s.cfg.Clock.Since(sent) >= cl.remaining {
		// Past the run's deadline the heartbeat no longer renews the job
		// (on purpose: a run ignoring cancellation must not keep it), so
		// a renewal may report the lease gone before the local deadline's
		// own cancellation lands: either way the run reached its limit.
		cause = ErrLockAtMostFor
	}
	if ctx.Err() != nil && !errors.Is(cause, ErrLockAtMostFor) && !errors.Is(cause, ErrShutdown) {
		// The lease is gone: the run's completion could not commit, and
		// whoever takes the job over runs the slot again.
		log.Warn("job run stopped: lease lost", "event", "job_lost", "cause", cause.Error(),
			"elapsed_ms", elapsed.Milliseconds())
		s.onRun(r.Job, "lost", elapsed)
		s.drop(r.Job, h)
		return
	}
	if errors.Is(cause, ErrShutdown) {
		log.Warn("job run cancelled by shutdown; its slot will run again", "event", "job_cancelled")
		s.onRun(r.Job, "cancelled", elapsed)
		rctx, rcancel := context.WithTimeout(life, s.cfg.StaleAfter)
		defer rcancel()
		if rerr := s.store.release(rctx, r.Job, r.Fence); rerr != nil {
			log.Warn("releasing job at stop failed; its lease will run out", "event", "error", "error", rerr)
		}
		s.drop(r.Job, h)
		return
	}
	result, errText := "ok", ""
	if err != nil {
		result, errText = "failed", err.Error()
		if errors.Is(cause, ErrLockAtMostFor) {
			errText = fmt.Sprintf("%s: %v", ErrLockAtMostFor, err)
		}
	}
	sched, serr := cl.def.slots()
	if serr != nil {
		log.Error("job schedule unreadable", "event", "error", "error", serr)
		s.drop(r.Job, h)
		return
	}
	next := sched.Next(r.Slot)
	if r.Triggered {
		next = time.Time{}
	}
	cctx, ccancel := context.WithTimeout(life, s.cfg.StaleAfter)
	defer ccancel()
	if cerr := s.store.complete(cctx, r.Job, r.Fence, r.Slot, next, result, errText); cerr != nil {
		log.Warn("job run completion not recorded", "event", "job_fenced", "error", cerr)
		s.onRun(r.Job, "fenced", elapsed)
		s.drop(r.Job, h)
		return
	}
	if err != nil {
		log.Warn("job run failed", "event", "job_finished", "result", result, "error", errText,
			"elapsed_ms", elapsed.Milliseconds())
	} else {
		log.Info("job run finished", "event", "job_finished", "result", result, "elapsed_ms", elapsed.Milliseconds())
	}
	s.onRun(r.Job, result, elapsed)
	s.mu.Lock()
	h.running = false
	s.mu.Unlock()
	if cl.def.Mode != ModeLeader {
		// lock: released by the completion; expire: left to run out.
		s.drop(r.Job, h)
	} else {
		s.mu.Lock()
		watch := !h.watched
		h.watched = true
		s.mu.Unlock()
		if watch {
			go s.watchLeader(r.Job, h)
		}
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Scheduler) onRun(job, outcome string, elapsed time.Duration) {
	if s.cfg.OnRun != nil {
		s.cfg.OnRun(job, outcome, elapsed)
	}
}

// watchLeader forgets a leader-mode job held idle once its lease ends.
func (s *Scheduler) watchLeader(name string, h *heldJob) {
	<-h.lease.Context().Done()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[name] == h && !h.running {
		delete(s.held, name)
		if cause := context.Cause(h.lease.Context()); !errors.Is(cause, heartbeat.ErrReleased) {
			s.cfg.Logger.Warn("job lost while held between runs", "event", "job_lost", "job", name,
				"cause", cause.Error())
		}
	}
}

// drop stops tracking a job's lease locally (the database lease, if still
// ours, runs out or was already released).
func (s *Scheduler) drop(name string, h *heldJob) {
	s.mu.Lock()
	if s.held[name] == h {
		delete(s.held, name)
	}
	h.running = false
	s.mu.Unlock()
	s.hb.Release(h.lease)
}

func safeRun(ctx context.Context, fn RunFunc, r *Run) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("job panicked: %v", p)
		}
	}()
	return fn(ctx, r)
}

// shutdown lets runs finish (ShutdownTimeout at most), then cancels them,
// and releases every job still held, so others may claim at once.
func (s *Scheduler) shutdown() {
	done := make(chan struct{})
	go func() { s.running.Wait(); close(done) }()
	select {
	case <-done:
	case <-s.cfg.Clock.After(s.cfg.ShutdownTimeout):
		s.mu.Lock()
		for _, h := range s.held {
			if h.running && h.cancel != nil {
				h.cancel(ErrShutdown)
			}
		}
		s.mu.Unlock()
		<-done
	}
	s.mu.Lock()
	held := s.held
	s.held = map[string]*heldJob{}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.StaleAfter)
	defer cancel()
	for name, h := range held {
		if err := s.store.release(ctx, name, h.lease.Version); err != nil {
			s.cfg.Logger.Warn("releasing job at stop failed; its lease will run out", "event", "error",
				"job", name, "error", err)
		}
		s.hb.Release(h.lease)
	}
	s.cfg.Logger.Info("scheduler stopped", "event", "scheduler_stopped", "worker", s.cfg.InstanceID)
}
