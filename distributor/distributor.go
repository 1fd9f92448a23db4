package distributor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/batonhq/baton/internal/notify"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/dberr"
	"github.com/batonhq/baton/internal/decide"
	"github.com/batonhq/baton/internal/keepalive"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
	"github.com/jackc/pgx/v5/stdlib"
)

// ErrIncomplete is returned by Run in until-done mode when it finished but
// some partitions are quarantined with work left, wrapped in an
// *IncompleteError that counts them.
var ErrIncomplete = errors.New("work remains on quarantined partitions")

// errAbandoned cancels batches still running when the shutdown timeout ends.
var errAbandoned = errors.New("batch abandoned at shutdown")

// Distributor claims partitions and runs a Processor on them.
type Distributor struct {
	db    *dbconn.DB
	store *taskstore.Store // the protocol's statements
	admin *partition.Store // re-reads of progress (Progress)
	proc  Processor
	cfg   Config
	log   *slog.Logger

	worker taskstore.Worker
	hb     *keepalive.Service
	hbConn *pinnedConn
	// ownListen is the listen handle the distributor opened from
	// db.ListenURL, closed when it stops.
	ownListen *dbconn.DB

	// outage is the database's state as the heartbeat finds it (outage.go).
	outage outage

	mu   sync.Mutex
	held map[string]*held
	// claiming holds the keys of claims in flight with their first batch
	// (claimFreshAll): they take room as held partitions do, and are not
	// claimed a second time meanwhile. Each maps to its pending items as
	// read for a member of a group, 0 for a spare (withinBacklogShare).
	claiming map[string]int64
	// lostClaims are candidates another worker's claim transaction held
	// at their fence: skipped while at the same version, for a lease's
	// length at most (that transaction has ended by then).
	lostClaims map[string]lostClaim
	// takeovers: the dead workers' partitions this worker leaves to the
	// others for a while (spread.go); the claim loop's alone.
	takeovers takeoverWait
	// dying are partitions whose claim transaction this worker gave up
	// on mid-statement (its deadline passed): the server may still hold
	// their rows until it notices, so a fence that finds them locked then
	// lost them to this worker's own dying transaction, not to another
	// worker, and they are not skipped as lost claims. Until when.
	dying map[string]time.Time
	// size bounds the items a batch or a group takes (sizing.go).
	size *sizer
	// heldQ queues held partitions' batches behind the one in flight, to
	// run together (heldgroup.go).
	heldQ heldQueue
	share int
	// overflow: work waits that no other worker wants, for a while now
	// (since overflowSince): claim beyond the share (applyShare).
	overflow      bool
	overflowSince time.Time
	// shareIdle: the share was computed from a load with no work at all.
	shareIdle bool
	// othersBacklog and liveWorkers are the last load's pending items of
	// all but this worker's partitions (less those it claimed since) and
	// its live count: with the items its own partitions have pending,
	// known at each claim and commit, they bound the share between loads
	// (decide.BacklogShare).
	othersBacklog int64
	liveWorkers   int

	wakeClaim chan struct{}
	// workChanged is set by notifications of work added or retried: the
	// next claim round recomputes the fair share first, at most once a
	// heartbeat. workerLeft is set when a worker left: the next claim round
	// recomputes at once.
	workChanged atomic.Bool
	workerLeft  atomic.Bool
	stopping    chan struct{} // closed: claim nothing more
	// leaving is closed once the worker has left the live count: held
	// partitions are then handed back. Not before, or the workers that a
	// release wakes would still count this one and compute too small a
	// share.
	leaving   chan struct{}
	abandon   context.Context
	abandonFn context.CancelCauseFunc
	base      context.Context // parent of lease contexts; outlives Start's ctx
	baseStop  context.CancelFunc
	wg        sync.WaitGroup
	loopDone  chan struct{}
	done      chan struct{}
	err       error
	stopOnce  sync.Once
	started   atomic.Bool
}

type held struct {
	lease     *keepalive.Lease
	takeover  bool
	claimedAt time.Time
	prevBeat  time.Time     // takeover: the old owner's last heartbeat (database clock)
	started   bool          // a batch of this claim has committed
	failWith  error         // a first batch failed in the claim's transaction: record it first
	handBack  atomic.Bool   // release at the next batch boundary (rebalance)
	idle      atomic.Bool   // leader mode: caught up, waiting for new work
	nudge     chan struct{} // new work or hand-back request (leader mode)
	tried     int           // items the last batch was allowed (its Limit)
	took      time.Duration // how long the last batch took, to its end or failure
	pending   atomic.Int64  // items pending as of the claim or the last commit (the share's backlog)
}

// New returns a distributor over db running p. db's pool should allow
// cfg.PoolSize() connections.
//
// db comes from dbconn.Open, or from dbconn.Wrap for a handle the
// application opened itself, which says whether it goes through a
// transaction pooler (then the worker never LISTENs nor prepares
// statements through it) and which timeouts its transactions carry. Its
// driver must be pgx's database/sql driver
// (github.com/jackc/pgx/v5/stdlib: sql.Open("pgx", url) or stdlib.OpenDB),
// which batches (Batch.CopyFrom, Exec, QueryRaw) and LISTEN need; New rejects any other driver
// rather than lose wake-ups silently.
func New(db *dbconn.DB, p Processor, cfg Config) (*Distributor, error) {
	if db == nil {
		return nil, errors.New("distributor.New: db is nil: pass a handle from dbconn.Open, or wrap one opened with pgx's stdlib driver with dbconn.Wrap")
	}
	if p == nil {
		return nil, errors.New("distributor.New: the Processor is nil: pass one (a type with a Process method, or a ProcessorFunc)")
	}
	for _, h := range []*dbconn.DB{db, cfg.ListenDB} {
		if h == nil {
			continue
		}
		if _, ok := h.Driver().(*stdlib.Driver); !ok {
			return nil, fmt.Errorf("distributor.New: the database handle's driver is %T, which cannot LISTEN nor run batches: open it with pgx's stdlib driver (sql.Open(\"pgx\", url) or stdlib.OpenDB, package github.com/jackc/pgx/v5/stdlib)", h.Driver())
		}
	}
	if k, ok := p.(Kinded); ok {
		switch {
		case cfg.Kind == "":
			cfg.Kind = k.Kind()
		case cfg.Kind != k.Kind():
			return nil, fmt.Errorf("invalid distributor config: Kind is %q, but the processor (%T) handles partitions of kind %q only", cfg.Kind, p, k.Kind())
		}
	}
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("invalid distributor config: %w", err)
	}
	host, _ := os.Hostname()
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	w := taskstore.Worker{
		InstanceID: cfg.Name + partition.InstanceSeparator + hex.EncodeToString(suffix[:]),
		Name:       cfg.Name, Hostname: host, PID: os.Getpid(), Mode: string(cfg.Mode),
	}
	d := &Distributor{
		db: db, store: newStore(db, cfg), admin: partition.NewStore(db, cfg.Schema).Kind(cfg.Kind), proc: p, cfg: cfg,
		log:    cfg.Logger.With("worker", w.InstanceID),
		worker: w, held: map[string]*held{}, claiming: map[string]int64{}, lostClaims: map[string]lostClaim{},
		dying: map[string]time.Time{}, size: newSizer(cfg.BatchSize, batchStart, cfg.ClaimGroupItems, cfg.StaleAfter/2, cfg.BatchTarget),
		wakeClaim: make(chan struct{}, 1), stopping: make(chan struct{}),
		leaving:  make(chan struct{}),
		loopDone: make(chan struct{}), done: make(chan struct{}),
	}
	hbCfg := cfg.heartbeatConfig()
	hbCfg.Logger, hbCfg.OnBeat = d.log, d.observeBeat
	d.hbConn = &pinnedConn{db: db}
	hb, err := keepalive.New(renewer{d.hbConn, d.store, &d.worker, d.wantedMore, cfg.StaleAfter, cfg.renewBelow()}, hbCfg)
	if err != nil {
		return nil, err
	}
	d.hb = hb
	d.abandon, d.abandonFn = context.WithCancelCause(context.Background())
	d.base, d.baseStop = context.WithCancel(context.Background())
	return d, nil
}

// registerTimeout is the least time Start gives the database to register
// the worker (see Config.StartTimeout).
const registerTimeout = 10 * time.Second

// InstanceID is the owner id this worker writes into task rows.
func (d *Distributor) InstanceID() string { return d.worker.InstanceID }

// Start registers the worker and starts claiming in the background. It
// returns once registered, or with an error when the database does not
// answer within StartTimeout (StaleAfter, at least 10s, by default) or
// before ctx ends, or answers with an error that is not transient. Cancelling
// ctx stops the distributor gracefully, as Stop does.
func (d *Distributor) Start(ctx context.Context) error {
	if !d.started.CompareAndSwap(false, true) {
		return errors.New("distributor already started")
	}
	err := d.register(ctx)
	if err != nil && d.ownListen != nil {
		_ = d.ownListen.Close()
	}
	return err
}

// register is Start once the distributor is marked started.
func (d *Distributor) register(ctx context.Context) error {
	// Register (one heartbeat with nothing held) so that others count this
	// worker in their fair share before it claims anything.
	// This also opens the heartbeat's pinned connection before any batch
	// competes for connections.
	// Bounded by StartTimeout: a database that cannot answer for that long
	// fails the start rather than hanging it.
	rctx, cancel := context.WithTimeout(ctx, d.cfg.StartTimeout)
	defer cancel()
	listenDB, err := d.listenHandle(rctx)
	if err != nil {
		return err
	}
	d.worker.Wake = notify.WakePoll
	if listenDB != nil {
		d.worker.Wake = notify.WakeListen
	}
	// A database restarting or failing over as the worker starts answers
	// with errors that say nothing about the data (the server shutting
	// down, connections refused): retried with back-off until the bound.
	for failures := 0; ; failures++ {
		_, err = (renewer{d.hbConn, d.store, &d.worker, d.wantedMore, d.cfg.StaleAfter, d.cfg.renewBelow()}).Renew(rctx, nil)
		if err == nil {
			break
		}
		if !dberr.Transient(err) || rctx.Err() != nil {
			return fmt.Errorf("registering worker %s: %w", d.worker.InstanceID, causeOr(rctx, err))
		}
		d.log.Debug("registering worker failed; retrying", "error", err, "failures", failures+1)
		select {
		case <-rctx.Done():
			return fmt.Errorf("registering worker %s: %w", d.worker.InstanceID, causeOr(rctx, err))
		case <-d.cfg.Clock.After(decide.Backoff(d.cfg.Backoff, d.cfg.Heartbeat, failures)):
		}
	}
	if err := d.hb.Start(d.base); err != nil {
		return err
	}
	d.log.Info("worker started", "event", "started", "kind", d.cfg.Kind, "mode", d.cfg.Mode,
		"heartbeat", d.cfg.Heartbeat, "stale_after", d.cfg.StaleAfter, "confirm", d.cfg.Confirm,
		"max_partitions", d.cfg.MaxPartitions, "batch_size", d.cfg.BatchSize, "batch_target", d.cfg.BatchTarget, "wake", d.worker.Wake)
	if listenDB != nil {
		go d.listen(d.base, listenDB)
	}
	go d.claimLoop()
	go func() {
		select {
		case <-ctx.Done():
			d.Stop()
		case <-d.done:
		}
	}()
	return nil
}

// PartitionsByState counts the partitions this worker owns, by local state:
// "confirming" (a takeover waiting for its confirmation heartbeats),
// "active", and "handing_back" (to be released at the next batch boundary).
func (d *Distributor) PartitionsByState() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]int{"confirming": 0, "active": 0, "handing_back": 0}
	for _, h := range d.held {
		switch {
		case h.handBack.Load():
			out["handing_back"]++
		case h.takeover && !h.lease.IsConfirmed():
			out["confirming"]++
		default:
			out["active"]++
		}
	}
	return out
}

// Done is closed when the distributor has stopped: after Stop, or in
// until-done mode once all work is done.
func (d *Distributor) Done() <-chan struct{} { return d.done }

// Err is the reason the distributor stopped, after Done is closed: nil for
// a graceful stop or finished work, ErrIncomplete, or a fatal error.
func (d *Distributor) Err() error {
	<-d.done
	return d.err
}

// Run starts the distributor and blocks until ctx is cancelled (then stops
// gracefully and returns nil) or, in until-done mode, all work is done.
func (d *Distributor) Run(ctx context.Context) error {
	if err := d.Start(ctx); err != nil {
		if ctx.Err() != nil {
			// Stopped while starting: nothing was claimed, so there is
			// nothing to hand back; a graceful stop like any other.
			return nil
		}
		return err
	}
	return d.Err()
}

// Stop stops gracefully: claims nothing more, lets batches in flight commit
// (if still owned) for up to ShutdownTimeout, then abandons the rest,
// releases every partition so others can claim it at once, and returns.
// It is idempotent and safe to call from several goroutines.
func (d *Distributor) Stop() { d.finish(nil) }

func (d *Distributor) finish(err error) {
	d.stopOnce.Do(func() {
		d.err = err
		close(d.stopping)
		if !d.started.Load() {
			close(d.done)
			return
		}
		<-d.loopDone
		// Leave the live count before handing partitions back, so the
		// workers their release notifications wake count one fewer and
		// take a larger share at once. Heartbeats still renew the leases.
		d.markStopped()
		close(d.leaving)
		d.nudgeAll()
		waited := make(chan struct{})
		go func() { d.wg.Wait(); close(waited) }()
		select {
		case <-waited:
		case <-d.cfg.Clock.After(d.cfg.ShutdownTimeout):
			d.log.Warn("shutdown timeout: abandoning batches in flight", "timeout", d.cfg.ShutdownTimeout)
			d.abandonFn(errAbandoned)
			<-waited
		}
		d.hb.Stop()
		d.hbConn.close()
		d.baseStop()
		if d.ownListen != nil {
			_ = d.ownListen.Close()
		}
		d.log.Info("worker stopped", "event", "stopped")
		close(d.done)
	})
}

func (d *Distributor) markStopped() {
	// Bounded, so that an unreachable database cannot hold the stop, but
	// never so tightly that a busy server fails it: a mark that fails
	// leaves the others counting this worker until its registration runs
	// out.
	ctx, cancel := context.WithTimeout(context.Background(), max(d.cfg.StaleAfter/2, registerTimeout))
	defer cancel()
	if err := d.store.StopWorker(ctx, d.worker.InstanceID); err != nil {
		d.log.Warn("could not mark worker stopped; others count it until its registration expires", "error", err)
	}
}

func (d *Distributor) nudgeAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, h := range d.held {
		select {
		case h.nudge <- struct{}{}:
		default:
		}
	}
}

func (d *Distributor) wake() {
	select {
	case d.wakeClaim <- struct{}{}:
	default:
	}
}

// heldCount counts the partitions held, and those being claimed with their
// first batch: a worker with either is not idle.
func (d *Distributor) heldCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.held) + len(d.claiming)
}

func (d *Distributor) emit(e Event) {
	d.observeEvent(e)
	if d.cfg.OnEvent != nil {
		e.Worker = d.worker.InstanceID
		e.At = d.cfg.Clock.Now()
		d.cfg.OnEvent(e)
	}
}

func (d *Distributor) isStopping() bool {
	select {
	case <-d.stopping:
		return true
	default:
		return false
	}
}

func (d *Distributor) isLeaving() bool {
	select {
	case <-d.leaving:
		return true
	default:
		return false
	}
}
