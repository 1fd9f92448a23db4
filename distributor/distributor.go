package distributor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/uptrace/bun"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/batonhq/baton/heartbeat"
	"github.com/batonhq/baton/internal/dbconn"
	"github.com/batonhq/baton/internal/dberr"
	"github.com/batonhq/baton/partition"
)

// Processor processes a partition's work, one batch at a time.
type Processor interface {
	// Process handles the next work items of b.Lease.Key after
	// b.Checkpoint.Position (at most b.Limit of them), writing its output
	// through b.Tx, and returns the new checkpoint. The distributor records
	// the checkpoint in the same transaction and commits it only if the
	// claim is still current, so output and checkpoint are committed
	// together or not at all, and only by the partition's owner.
	//
	// ctx is cancelled when ownership is lost; Process must not keep
	// writing after that (its transaction would be rolled back anyway).
	// Side effects outside b.Tx are at least once: use b.IdempotencyKey.
	Process(ctx context.Context, b *Batch) (Result, error)
}

// ProcessorFunc adapts a function to Processor.
type ProcessorFunc func(ctx context.Context, b *Batch) (Result, error)

// Process calls f.
func (f ProcessorFunc) Process(ctx context.Context, b *Batch) (Result, error) { return f(ctx, b) }

// Batch is one unit of work handed to a Processor.
type Batch struct {
	// Lease is the claim under which the batch runs.
	Lease partition.Lease
	// Owner is this worker's instance id.
	Owner string
	// Tx is the fenced transaction: the task row is locked and verified
	// to belong to Lease.
	Tx bun.Tx
	// Conn is the connection Tx runs on (zero when the batch was built
	// without one). Use it only through Raw.
	Conn bun.Conn
	// Checkpoint is the committed progress, read under the fence.
	Checkpoint partition.Checkpoint
	// Limit is the most work items to process.
	Limit int
}

// ErrNoConn is returned by Batch.Raw for a batch built without its
// connection.
var ErrNoConn = errors.New("batch has no connection")

// Raw calls fn with the pgx connection that the batch's transaction runs on,
// for what database/sql cannot express: COPY, binary-format parameters and
// results. Statements sent through it run inside the fenced transaction, so
// they are committed with the checkpoint or not at all. fn must not commit,
// roll back or begin a transaction, and must not keep the connection after
// it returns.
func (b *Batch) Raw(fn func(conn *pgx.Conn) error) error {
	if b.Conn.Conn == nil {
		return ErrNoConn
	}
	return dbconn.Raw(b.Conn.Conn, fn)
}

// IdempotencyKey names the batch's items for side effects outside the
// database: the same items always get the same key, whoever processes them.
func (b *Batch) IdempotencyKey() string {
	return fmt.Sprintf("%s/%d", b.Lease.Key, b.Checkpoint.Position)
}

// Result is a batch's new checkpoint.
type Result struct {
	// Position is the new checkpoint position; it must lie in
	// (Checkpoint.Position, Checkpoint.Available].
	Position int64
	// State is processor-defined checkpoint state (JSON), stored with
	// Position. Nil stores {}.
	State json.RawMessage
}

// ErrIncomplete is returned by Run in until-done mode when it finished but
// some partitions are quarantined with work left.
var ErrIncomplete = errors.New("work remains on quarantined partitions")

// errAbandoned cancels batches still running when the shutdown timeout ends.
var errAbandoned = errors.New("batch abandoned at shutdown")

// Distributor claims partitions and runs a Processor on them.
type Distributor struct {
	db    *bun.DB
	store *partition.Store
	proc  Processor
	cfg   Config
	log   *slog.Logger

	worker partition.Worker
	hb     *heartbeat.Service
	hbConn *pinnedConn

	mu    sync.Mutex
	held  map[string]*held
	share int
	// shareIdle: the share was computed from a load with no work at all.
	shareIdle bool

	wakeClaim chan struct{}
	// workChanged is set by notifications (work released, loaded or
	// retried): the next claim round recomputes the fair share first.
	workChanged atomic.Bool
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
	lease     *heartbeat.Lease
	takeover  bool
	claimedAt time.Time
	prevBeat  time.Time     // takeover: the old owner's last heartbeat (database clock)
	started   bool          // a batch of this claim has committed
	handBack  atomic.Bool   // release at the next batch boundary (rebalance)
	idle      atomic.Bool   // leader mode: caught up, waiting for new work
	nudge     chan struct{} // new work or hand-back request (leader mode)
}

// New returns a distributor over db running p. db's pool should allow
// cfg.PoolSize() connections.
//
// db must be opened with pgx's database/sql driver
// (github.com/jackc/pgx/v5/stdlib: sql.Open("pgx", url) or stdlib.OpenDB),
// which batches (Batch.Raw) and LISTEN need; New rejects any other driver
// rather than lose wake-ups silently.
func New(db *bun.DB, p Processor, cfg Config) (*Distributor, error) {
	if db == nil {
		return nil, errors.New("distributor.New: db is nil: pass a *bun.DB over pgx's stdlib driver (bun.NewDB(sql.Open(\"pgx\", url), pgdialect.New()))")
	}
	if p == nil {
		return nil, errors.New("distributor.New: the Processor is nil: pass one (a type with a Process method, or a ProcessorFunc)")
	}
	for _, h := range []*bun.DB{db, cfg.ListenDB} {
		if h == nil {
			continue
		}
		if _, ok := h.Driver().(*stdlib.Driver); !ok {
			return nil, fmt.Errorf("distributor.New: the database handle's driver is %T, which cannot LISTEN nor run batches: open it with pgx's stdlib driver (sql.Open(\"pgx\", url) or stdlib.OpenDB, package github.com/jackc/pgx/v5/stdlib)", h.Driver())
		}
	}
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("invalid distributor config: %w", err)
	}
	host, _ := os.Hostname()
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	w := partition.Worker{
		InstanceID: cfg.Name + partition.InstanceSeparator + hex.EncodeToString(suffix[:]),
		Name:       cfg.Name, Hostname: host, PID: os.Getpid(), Mode: string(cfg.Mode),
	}
	d := &Distributor{
		db: db, store: newStore(db, cfg), proc: p, cfg: cfg,
		log:    cfg.Logger.With("worker", w.InstanceID),
		worker: w, held: map[string]*held{},
		wakeClaim: make(chan struct{}, 1), stopping: make(chan struct{}),
		leaving:  make(chan struct{}),
		loopDone: make(chan struct{}), done: make(chan struct{}),
	}
	hbCfg := cfg.heartbeatConfig()
	hbCfg.Logger = d.log
	d.hbConn = &pinnedConn{db: db}
	hb, err := heartbeat.New(renewer{d.hbConn, d.store, &d.worker, cfg.StaleAfter, cfg.Schema}, hbCfg)
	if err != nil {
		return nil, err
	}
	d.hb = hb
	d.abandon, d.abandonFn = context.WithCancelCause(context.Background())
	d.base, d.baseStop = context.WithCancel(context.Background())
	return d, nil
}

// renewer renews over a pinned connection, so a heartbeat never waits for
// a pool saturated by batches nor pays for a new connection; it re-reads
// over the pool, since the pinned connection is suspect after a failure.
type renewer struct {
	conn   *pinnedConn
	store  *partition.Store
	worker *partition.Worker // its Wake is set once, in Start, before any renewal
	ttl    time.Duration
	schema string
}

func (r renewer) Renew(ctx context.Context, leases []partition.Lease) (out []partition.Renewal, err error) {
	err = r.conn.do(ctx, func(db bun.IDB) error {
		out, err = partition.NewStore(db, r.schema).Heartbeat(ctx, *r.worker, r.ttl, leases)
		return err
	})
	return out, err
}

func (r renewer) Inspect(ctx context.Context, leases []partition.Lease) ([]partition.Held, error) {
	return r.store.Inspect(ctx, r.worker.InstanceID, leases)
}

// pinnedConn is one connection kept for a single purpose, replaced after
// any failure that may have left it broken.
type pinnedConn struct {
	db   *bun.DB
	mu   sync.Mutex
	conn *bun.Conn
}

func (p *pinnedConn) do(ctx context.Context, fn func(bun.IDB) error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil {
		c, err := p.db.Conn(ctx)
		if err != nil {
			return err
		}
		p.conn = &c
	}
	err := fn(*p.conn)
	if err != nil && dberr.UnknownOutcome(err) {
		_ = p.conn.Close()
		p.conn = nil
	}
	return err
}

func (p *pinnedConn) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil {
		_ = p.conn.Close()
		p.conn = nil
	}
}

// registerTimeout is the least time Start gives the database to register
// the worker.
const registerTimeout = 10 * time.Second

// InstanceID is the owner id this worker writes into task rows.
func (d *Distributor) InstanceID() string { return d.worker.InstanceID }

// Start registers the worker and starts claiming in the background. It
// returns once registered, or with an error when the database does not
// answer within StaleAfter (at least 10s) or before ctx ends. Cancelling
// ctx stops the distributor gracefully, as Stop does.
func (d *Distributor) Start(ctx context.Context) error {
	if !d.started.CompareAndSwap(false, true) {
		return errors.New("distributor already started")
	}
	// Register (one heartbeat with nothing held) so that others count this
	// worker in their fair share before it claims anything.
	// This also opens the heartbeat's pinned connection before any batch
	// competes for connections.
	// Bounded: a database that cannot answer fails the start rather than
	// hanging it. Connecting may take a while on a busy server, so the
	// bound is never shorter than registerTimeout.
	rctx, cancel := context.WithTimeout(ctx, max(d.cfg.StaleAfter, registerTimeout))
	defer cancel()
	listenDB, err := d.listenHandle(rctx)
	if err != nil {
		return err
	}
	d.worker.Wake = partition.WakePoll
	if listenDB != nil {
		d.worker.Wake = partition.WakeListen
	}
	_, err = (renewer{d.hbConn, d.store, &d.worker, d.cfg.StaleAfter, d.cfg.Schema}).Renew(rctx, nil)
	if err != nil {
		return fmt.Errorf("registering worker %s: %w", d.worker.InstanceID, err)
	}
	if err := d.hb.Start(d.base); err != nil {
		return err
	}
	d.log.Info("worker started", "event", "started", "mode", d.cfg.Mode,
		"heartbeat", d.cfg.Heartbeat, "stale_after", d.cfg.StaleAfter, "confirm", d.cfg.Confirm,
		"max_partitions", d.cfg.MaxPartitions, "batch_size", d.cfg.BatchSize, "wake", d.worker.Wake)
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

// Held counts the partitions this worker holds, by local state:
// "confirming" (a takeover waiting for its confirmation heartbeats),
// "active", and "handing_back" (to be released at the next batch boundary).
func (d *Distributor) Held() map[string]int {
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
		d.log.Info("worker stopped", "event", "stopped")
		close(d.done)
	})
}

func (d *Distributor) markStopped() {
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.StaleAfter/2)
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

// listenHandle returns the handle to LISTEN on: Config.ListenDB, or the
// main handle, or nil (poll only) when the main handle goes through a
// transaction pooler, where a LISTEN would be tied to whichever server
// connection ran it and its notifications would go astray. It connects
// once to find out.
func (d *Distributor) listenHandle(ctx context.Context) (*bun.DB, error) {
	if err := d.db.PingContext(ctx); err != nil {
		return nil, fmt.Errorf("connecting worker %s: %w", d.worker.InstanceID, err)
	}
	if d.cfg.PollOnly {
		return nil, nil
	}
	if d.cfg.ListenDB == nil {
		if dbconn.Pooled(d.db) {
			d.log.Info("the database connection goes through a transaction pooler: polling for work every interval (give a direct listen connection to be woken at once)",
				"poll_interval", d.cfg.PollInterval)
			return nil, nil
		}
		return d.db, nil
	}
	if err := d.cfg.ListenDB.PingContext(ctx); err != nil {
		return nil, fmt.Errorf("connecting the listen connection of worker %s: %w", d.worker.InstanceID, err)
	}
	if dbconn.Pooled(d.cfg.ListenDB) {
		return nil, errors.New("the listen connection goes through a transaction pooler: LISTEN needs a direct session connection to PostgreSQL")
	}
	return d.cfg.ListenDB, nil
}

// listen wakes the claim loop (and leader partitions) on notifications.
// Polling remains the fallback when the listening connection is down.
func (d *Distributor) listen(ctx context.Context, db *bun.DB) {
	for ctx.Err() == nil {
		err := d.listenOnce(ctx, db)
		if ctx.Err() != nil {
			return
		}
		d.log.Debug("listen connection lost; polling until it is back", "error", err)
		select {
		case <-ctx.Done():
			return
		case <-d.cfg.Clock.After(d.cfg.PollInterval):
		}
	}
}

func (d *Distributor) listenOnce(ctx context.Context, db *bun.DB) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return dbconn.Raw(conn.Conn, func(pc *pgx.Conn) error {
		// The connection is closed when done, so the pool discards it
		// instead of handing out a connection that is still listening.
		defer pc.Close(context.Background())
		// Named so that operators can tell listening workers from polling
		// ones; LISTEN stays this session's last statement.
		if _, err := pc.Exec(ctx, "SELECT set_config('application_name', $1, false)",
			partition.ListenApplicationName+d.worker.InstanceID); err != nil {
			return err
		}
		if _, err := pc.Exec(ctx, "LISTEN "+pgx.Identifier{partition.NotifyChannel}.Sanitize()); err != nil {
			return err
		}
		// Notifications sent before LISTEN took effect (at start, or while
		// the connection was down) are gone: look once now, so work that
		// arrived in that window waits for nobody's poll.
		d.wake()
		d.nudgeAll()
		for {
			if _, err := pc.WaitForNotification(ctx); err != nil {
				return err
			}
			d.workChanged.Store(true)
			d.wake()
			d.nudgeAll()
		}
	})
}

// claimLoop claims partitions up to the fair share until stopped.
//
// A stop does not cancel a round in flight: a claim statement cancelled on
// the client may still apply on the server, and the worker would hold rows
// it does not know about until their leases expired. Each round is bounded
// by its own timeout instead, and the loop checks for a stop between rounds.
func (d *Distributor) claimLoop() {
	defer close(d.loopDone)
	poll := d.cfg.Clock.NewTicker(d.cfg.PollInterval)
	defer poll.Stop()
	var lastRebalance, lastPrune time.Time
	failures := 0
	for !d.isStopping() {
		ctx, cancel := context.WithTimeout(d.base, d.cfg.StaleAfter/2)
		now := d.cfg.Clock.Now()
		var roundErr error
		// A notification means work was released (a worker may have left),
		// loaded or retried, so the share may be stale: a worker with room
		// recomputes it now rather than at the next rebalance, at most
		// once a heartbeat.
		// A notification inside that heartbeat is kept, not dropped: the
		// loop comes back for it when the heartbeat has passed.
		// While a recompute is owed, the share in hand is known to be stale
		// (computed, say, when this worker was alone or there was no work),
		// so the round claims nothing: claiming up to a stale share would
		// take other workers' partitions, and only a rebalance, possibly an
		// hour away, would give them back.
		recompute, owed := false, false
		var deferred <-chan time.Time
		if d.workChanged.Load() && d.hasRoom() {
			if wait := d.cfg.Heartbeat - now.Sub(lastRebalance); wait > 0 && !lastRebalance.IsZero() {
				deferred = d.cfg.Clock.After(wait)
				owed = true
			} else {
				recompute = true
				d.workChanged.Store(false)
			}
		}
		if lastRebalance.IsZero() || now.Sub(lastRebalance) >= d.cfg.RebalanceInterval || recompute ||
			d.cfg.UntilDone && d.heldCount() == 0 {
			finished, err := d.rebalance(ctx)
			if err != nil {
				roundErr = fmt.Errorf("reading cluster load: %w", err)
				if recompute {
					d.workChanged.Store(true) // still owed: the retry recomputes
					owed = true
				}
			} else {
				lastRebalance = now
			}
			if finished != nil {
				cancel()
				go d.finish(finished.err)
				return
			}
		}
		if now.Sub(lastPrune) >= pruneInterval {
			d.pruneEvents(ctx)
			lastPrune = now
		}
		if !owed {
			if err := d.claim(ctx); err != nil {
				roundErr = errors.Join(roundErr, fmt.Errorf("claiming: %w", err))
			}
		}
		cancel()
		// A failed round is retried after a backoff rather than at the next
		// poll: the work it was looking for is still waiting.
		var retry <-chan time.Time
		if roundErr != nil {
			delay := min(backoff(d.cfg.Backoff, d.cfg.MaxBackoff, failures), d.cfg.PollInterval)
			failures++
			d.emit(Event{Kind: EventClaimRoundFailed, Err: roundErr, Attempts: failures})
			d.log.Warn("claim round failed", "event", string(EventClaimRoundFailed), "error", roundErr,
				"failures", failures, "retry_in", delay)
			retry = d.cfg.Clock.After(delay)
		} else {
			failures = 0
		}
		select {
		case <-d.stopping:
			return
		case <-poll.Chan():
		case <-d.wakeClaim:
		case <-retry:
		case <-deferred:
		}
	}
}

// backoff is base doubled per earlier failure, capped at limit.
func backoff(base, limit time.Duration, failures int) time.Duration {
	d := base
	for ; failures > 0 && d < limit; failures-- {
		d *= 2
	}
	return min(d, limit)
}

type finished struct{ err error }

// rebalance recomputes the fair share, asks surplus partitions to be handed
// back, and in until-done mode detects that all work is done.
func (d *Distributor) rebalance(ctx context.Context) (*finished, error) {
	load, err := d.store.FairShareLoad(ctx, d.cfg.MaxPartitions)
	if err != nil {
		return nil, err
	}
	if d.cfg.UntilDone && d.heldCount() == 0 && load.Busy == 0 {
		quarantined, err := d.store.QuarantinedCount(ctx)
		if err != nil {
			return nil, err
		}
		if quarantined > 0 {
			return &finished{fmt.Errorf("%w: %d partition(s) quarantined; see status, then retry", ErrIncomplete, quarantined)}, nil
		}
		d.log.Info("all work done", "event", "done")
		return &finished{}, nil
	}
	d.applyShare(load)
	return nil, nil
}

// applyShare sets the fair share from load and asks surplus partitions to
// be handed back.
func (d *Distributor) applyShare(load partition.Load) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var keep []*held
	idle := 0
	for _, h := range d.held {
		if !h.handBack.Load() {
			keep = append(keep, h)
			if h.idle.Load() {
				idle++
			}
		}
	}
	p := planShare(load, len(keep), idle, d.cfg.Mode, d.cfg.MaxPartitions)
	d.log.Debug("fair share computed", "share", p.share, "busy", load.Busy, "live_workers", load.LiveWorkers,
		"unclaimed", load.Unclaimed, "min_held", load.MinHeld)
	d.share = p.share
	d.shareIdle = load.Busy == 0
	handBack := func(h *held) {
		h.handBack.Store(true)
		select {
		case h.nudge <- struct{}{}:
		default:
		}
	}
	if p.handBack > 0 {
		// Newest claims first: they have the least progress to lose.
		slices.SortFunc(keep, func(a, b *held) int { return b.claimedAt.Compare(a.claimedAt) })
		for _, h := range keep[:p.handBack] {
			handBack(h)
		}
		d.log.Info("above fair share, handing back partitions", "held", len(d.held), "handing_back", p.handBack,
			"share", p.share, "live_workers", load.LiveWorkers)
	}
	if p.handBackIdle > 0 {
		n := 0
		for _, h := range keep {
			if n < p.handBackIdle && h.idle.Load() {
				handBack(h)
				n++
			}
		}
		d.log.Info("leader at capacity with work waiting: handing back idle partitions", "handing_back", n, "unclaimed", load.Unclaimed)
	}
}

// sharePlan is a fair-share decision: the share, and how many held
// partitions to hand back.
type sharePlan struct {
	share int // partitions this worker may hold: ceil(busy / live), at most MaxPartitions
	// claim is how many more unowned partitions the share allows.
	claim int
	// handBack is how many of the newest claims to hand back because the
	// worker holds more than its share and someone else can take them.
	handBack int
	// handBackIdle is how many caught-up partitions a leader at capacity
	// hands back so that waiting work nobody has room for can be claimed.
	handBackIdle int
}

// planShare decides the fair share from the cluster load and the worker's
// held partitions (not counting those already being handed back; idle of
// them caught up in leader mode). It is a pure function of its inputs.
func planShare(load partition.Load, held, idle int, mode Mode, maxPartitions int) sharePlan {
	p := sharePlan{share: maxPartitions}
	if load.LiveWorkers > 1 {
		p.share = min(p.share, max(1, (load.Busy+load.LiveWorkers-1)/load.LiveWorkers))
	}
	p.claim = max(0, p.share-held)
	// Hand back only when someone else can take the partitions: there is
	// nothing unclaimed left for them and some live worker is below its
	// share. Otherwise keep them and avoid needless handoffs.
	if surplus := held - p.share; surplus > 0 && load.Unclaimed == 0 && load.MinHeld < p.share {
		p.handBack = surplus
		return p
	}
	// A leader at capacity must not sit on caught-up partitions while
	// claimable work waits that nobody has room for.
	if mode == ModeLeader && load.Unclaimed > 0 && held >= p.share {
		p.handBackIdle = min(idle, load.Unclaimed)
	}
	return p
}

// hasRoom reports whether the worker holds fewer than MaxPartitions.
func (d *Distributor) hasRoom() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.held) < d.cfg.MaxPartitions
}

func (d *Distributor) heldCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.held)
}

// claim tries to fill the worker up to its share, and takes partitions of
// dead workers beyond it. Candidates are read from the head of the
// claimable index, shuffled so that workers polling at the same moment
// spread over different rows, and claimed in one compare-and-set
// statement.
//
// A dead worker's partitions (still owned, lease expired) are claimed up to
// MaxPartitions whatever the share: otherwise they would wait for a
// survivor below its share, and when every survivor is at its share that is
// the next rebalance after the dead worker's registration expires, beyond
// the takeover bound. The share corrects itself afterwards (the dead worker
// leaves the live count; surplus is handed back at batch boundaries).
func (d *Distributor) claim(ctx context.Context) error {
	want, room, idle := d.wanted()
	if room <= 0 {
		return nil
	}
	var cands []partition.Candidate
	var err error
	if want > 0 {
		cands, err = d.store.Candidates(ctx, 4*want+8)
	} else {
		cands, err = d.store.StaleCandidates(ctx, 4*room+8)
	}
	if err != nil {
		return err
	}
	if len(cands) == 0 {
		return nil
	}
	if idle && want > 0 {
		// The share was computed when there was no work (1 of nothing, or
		// all of it for a worker that was alone); work has arrived since,
		// perhaps seen by this poll before its notification: recompute
		// before claiming. This costs one load read per idle-to-busy turn.
		load, err := d.store.FairShareLoad(ctx, d.cfg.MaxPartitions)
		if err != nil {
			return err
		}
		d.applyShare(load)
		if want, room, _ = d.wanted(); room <= 0 {
			return nil
		}
	}
	mrand.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	for round := 0; round < 2 && room > 0 && len(cands) > 0; round++ {
		var try []partition.Candidate
		try, cands = pickClaims(cands, want, room)
		if len(try) == 0 {
			break
		}
		sent := d.cfg.Clock.Now()
		won, err := d.claimTraced(ctx, try)
		if err != nil {
			if !dberr.UnknownOutcome(err) {
				return err
			}
			// The claim may have applied with its reply lost: re-read, and
			// adopt whatever is ours so it is processed or handed back
			// rather than left owned until its lease expires.
			adopted, rerr := d.resolveClaims(try)
			if rerr != nil {
				return fmt.Errorf("%w (outcome re-read: %v)", err, rerr)
			}
			d.log.Warn("claim outcome was unknown; re-read it", "error", err, "adopted", len(adopted))
			won = adopted
		}
		for _, c := range won {
			d.emit(Event{Kind: EventClaimed, Key: c.Key, Version: c.Version, Takeover: c.Takeover, Position: c.Position})
			d.log.Info("claimed partition", "event", "claimed", d.cfg.KeyAttr, c.Key, "version", c.Version,
				"takeover", c.Takeover, "position", c.Position, "pending", c.Available-c.Position)
			d.start(c, sent)
			if !c.Takeover {
				want--
			}
			room--
		}
		if lost := len(try) - len(won); lost > 0 {
			d.emit(Event{Kind: EventClaimLost, Items: lost})
		}
	}
	return nil
}

// pickClaims chooses the candidates to claim in one statement: a dead
// worker's partitions (Owned) up to room, unowned ones up to want within
// room. It returns the choice and the candidates left for another round.
func pickClaims(cands []partition.Candidate, want, room int) (try, rest []partition.Candidate) {
	for _, c := range cands {
		switch {
		case len(try) >= room:
			rest = append(rest, c)
		case c.Owned:
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

// wanted is how many more partitions the share allows (want) and
// MaxPartitions allows (room), and whether the share was computed when
// there was no work at all. Both are zero while partitions are being handed
// back: claiming then would churn.
func (d *Distributor) wanted() (want, room int, idle bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, h := range d.held {
		if h.handBack.Load() {
			return 0, 0, d.shareIdle
		}
	}
	room = d.cfg.MaxPartitions - len(d.held)
	return min(min(d.share, d.cfg.MaxPartitions)-len(d.held), room), room, d.shareIdle
}

// resolveClaims finds which of the candidates a claim whose outcome is
// unknown actually won: those now at the next version under this owner.
func (d *Distributor) resolveClaims(cands []partition.Candidate) ([]partition.Claimed, error) {
	ctx, cancel := context.WithTimeout(d.base, d.cfg.StaleAfter/2)
	defer cancel()
	next := make([]partition.Lease, len(cands))
	owned := make(map[string]bool, len(cands))
	for i, c := range cands {
		next[i] = partition.Lease{Key: c.Key, Version: c.Version + 1}
		owned[c.Key] = c.Owned
	}
	held, err := d.store.Inspect(ctx, d.worker.InstanceID, next)
	if err != nil {
		return nil, err
	}
	out := make([]partition.Claimed, len(held))
	for i, h := range held {
		out[i] = partition.Claimed{Lease: h.Lease, Takeover: owned[h.Key]}
	}
	return out, nil
}

func (d *Distributor) start(c partition.Claimed, sent time.Time) {
	h := &held{takeover: c.Takeover, claimedAt: sent, prevBeat: c.PrevHeartbeat, nudge: make(chan struct{}, 1)}
	h.lease = d.hb.Track(d.base, c.Lease, sent, c.Takeover)
	d.mu.Lock()
	d.held[c.Key] = h
	d.mu.Unlock()
	d.wg.Add(1)
	go d.runPartition(h)
}

func (d *Distributor) emit(e Event) {
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

// runPartition processes one held partition until it is caught up (lock
// mode), handed back, lost or the worker stops.
func (d *Distributor) runPartition(h *held) {
	defer d.wg.Done()
	l := h.lease
	defer func() {
		d.mu.Lock()
		if cur, ok := d.held[l.Key]; ok && cur == h {
			delete(d.held, l.Key)
		}
		d.mu.Unlock()
		d.wake()
	}()
	lctx := l.Context()

	if h.takeover {
		_, span := tracer.Start(d.base, "baton.confirm", d.leaseAttrs(l.Lease))
		select {
		case <-l.Confirmed():
			span.End()
			d.emit(Event{Kind: EventConfirmed, Key: l.Key, Version: l.Version})
			d.log.Info("claim confirmed", "event", "confirmed", d.cfg.KeyAttr, l.Key, "version", l.Version,
				"waited_ms", d.cfg.Clock.Since(h.claimedAt).Milliseconds())
		case <-lctx.Done():
			endSpan(span, context.Cause(lctx))
			d.lost(h, context.Cause(lctx))
			return
		case <-d.leaving:
			span.End()
			d.release(h, "shutdown")
			return
		}
	}

	transient := 0
	for {
		if lctx.Err() != nil {
			d.lost(h, context.Cause(lctx))
			return
		}
		if d.isLeaving() {
			d.release(h, "shutdown")
			return
		}
		if h.handBack.Load() {
			d.release(h, "rebalance")
			return
		}
		_, caughtUp, released, err := d.batch(h)
		switch {
		case err == nil:
			transient = 0
		case errors.Is(err, partition.ErrFenced):
			d.hb.Release(l)
			d.record(partition.EventFenced, l.Lease, err)
			d.emit(Event{Kind: EventFenced, Key: l.Key, Version: l.Version, Err: err})
			d.log.Warn("commit rejected by the fence: partition belongs to a newer claim", "event", "fenced",
				d.cfg.KeyAttr, l.Key, "version", l.Version)
			return
		case lctx.Err() != nil:
			d.lost(h, context.Cause(lctx))
			return
		case errors.Is(err, errAbandoned):
			d.release(h, "shutdown")
			return
		case dberr.Transient(err) && transient < d.cfg.MaxAttempts:
			transient++
			d.log.Warn("batch failed with a transient error; retrying while the lease holds",
				d.cfg.KeyAttr, l.Key, "version", l.Version, "error", err, "attempt", transient)
			select {
			case <-lctx.Done():
			case <-d.leaving:
			case <-d.cfg.Clock.After(d.cfg.Heartbeat):
			}
			continue
		default:
			d.fail(h, err)
			return
		}
		if released {
			d.hb.Release(l)
			d.emit(Event{Kind: EventReleased, Key: l.Key, Version: l.Version, Reason: "caught_up"})
			d.log.Info("released partition", "event", "released", d.cfg.KeyAttr, l.Key, "version", l.Version,
				"reason", "caught_up", "with_batch", true)
			return
		}
		// A batch that reached the available count goes straight on: no
		// empty fenced transaction just to learn there is nothing left.
		// Work arriving meanwhile is not missed: a release notifies when
		// work is pending, and a leader is woken by its next heartbeat.
		if !caughtUp {
			continue
		}
		if d.cfg.Mode == ModeLock {
			d.release(h, "caught_up")
			return
		}
		// Leader: keep the partition and wait for new work.
		h.idle.Store(true)
		select {
		case <-l.Work():
		case <-h.nudge:
		case <-lctx.Done():
		case <-d.leaving:
		}
		h.idle.Store(false)
	}
}

// batch runs one fenced transaction: lock and verify the task row, let the
// processor write, record the checkpoint, commit. In lock mode a batch that
// catches up also releases the partition in the same transaction (released):
// output, checkpoint and release take one commit and one WAL flush.
func (d *Distributor) batch(h *held) (items int64, caughtUp, released bool, err error) {
	l := h.lease
	ctx, cancel := context.WithCancelCause(l.Context())
	defer cancel(nil)
	stop := context.AfterFunc(d.abandon, func() { cancel(context.Cause(d.abandon)) })
	defer stop()
	ctx, span := tracer.Start(ctx, "baton.batch", d.leaseAttrs(l.Lease))
	defer func() { endBatchSpan(span, items, caughtUp, err) }()

	start := d.cfg.Clock.Now()
	// A connection of its own, so that the processor can reach the
	// driver's connection inside the transaction (Batch.Raw).
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return 0, false, false, fmt.Errorf("beginning batch of %s: %w", l.Lease, causeOr(ctx, err))
	}
	defer func() { _ = conn.Close() }()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return 0, false, false, fmt.Errorf("beginning batch of %s: %w", l.Lease, causeOr(ctx, err))
	}
	defer func() { _ = tx.Rollback() }()
	if err := dbconn.SetLocalTimeouts(ctx, d.db, tx); err != nil {
		return 0, false, false, fmt.Errorf("beginning batch of %s: %w", l.Lease, causeOr(ctx, err))
	}
	cp, err := d.store.Fence(ctx, tx, d.worker.InstanceID, l.Lease)
	if err != nil {
		return 0, false, false, causeOr(ctx, err)
	}
	if !h.started {
		linkPrevious(span, cp.Traceparent)
	}
	if cp.Position >= cp.Available {
		return 0, true, false, nil
	}
	b := &Batch{Lease: l.Lease, Owner: d.worker.InstanceID, Tx: tx, Conn: conn, Checkpoint: cp,
		Limit: int(min(int64(d.cfg.BatchSize), cp.Available-cp.Position))}
	res, err := d.process(ctx, b)
	if err != nil {
		return 0, false, false, d.movedOr(ctx, l.Lease, cp.Position, causeOr(ctx, err))
	}
	if res.Position <= cp.Position || res.Position > cp.Available {
		return 0, false, false, fmt.Errorf("processing %s: processor returned position %d outside (%d, %d]",
			l.Lease, res.Position, cp.Position, cp.Available)
	}
	span.SetAttributes(attribute.Int64("baton.position", res.Position), attribute.Bool("baton.first_batch", !h.started),
		attribute.Bool("baton.takeover", h.takeover))
	if err := d.store.Advance(ctx, tx, l.Lease, cp.Position, res.Position, res.State); err != nil {
		return 0, false, false, d.movedOr(ctx, l.Lease, cp.Position, causeOr(ctx, err))
	}
	if !h.started {
		if err := d.store.RecordFirstBatch(ctx, tx, d.worker.InstanceID, l.Lease, res.Position,
			res.Position-cp.Position, h.prevBeat); err != nil {
			return 0, false, false, causeOr(ctx, err)
		}
	}
	caughtUp = res.Position >= cp.Available
	if caughtUp && d.cfg.Mode == ModeLock {
		// Hand the partition back in this transaction: the release locks
		// the row FOR UPDATE over the fence's FOR KEY SHARE (this
		// transaction's own, so no wait but for a renewal in flight) and
		// bumps the version; it commits with the output or not at all.
		l.SetReleasing(true)
		rctx, rspan := tracer.Start(ctx, "baton.release", d.leaseAttrs(l.Lease), trace.WithAttributes(
			attribute.String("baton.reason", "caught_up"), attribute.Bool("baton.with_batch", true)))
		keys, err := d.store.WithDB(tx).ReleaseFor(rctx, d.worker.InstanceID, "caught_up", []partition.Lease{l.Lease})
		if err == nil && len(keys) == 0 {
			err = fmt.Errorf("releasing %s with its last batch: %w", l.Lease, partition.ErrFenced)
		}
		endSpan(rspan, err)
		if err != nil {
			l.SetReleasing(false)
			return 0, false, false, causeOr(ctx, err)
		}
		released = true
	}
	if err := tx.Commit(); err != nil {
		if ctx.Err() != nil || !dberr.UnknownOutcome(err) {
			l.SetReleasing(false)
			return 0, false, false, fmt.Errorf("committing batch of %s: %w", l.Lease, causeOr(ctx, err))
		}
		// The commit may have applied with its reply lost: re-read.
		if ok, rerr := d.resolveCommit(l.Lease, res.Position, released); rerr != nil || !ok {
			l.SetReleasing(false)
			return 0, false, false, fmt.Errorf("committing batch of %s (outcome re-read: %v): %w", l.Lease, rerr, err)
		}
		d.log.Info("commit outcome was unknown; re-read shows it applied", d.cfg.KeyAttr, l.Key, "version", l.Version)
	}
	h.started = true
	items = res.Position - cp.Position
	elapsed := d.cfg.Clock.Since(start)
	d.emit(Event{Kind: EventCheckpoint, Key: l.Key, Version: l.Version, Items: int(items), Position: res.Position, Duration: elapsed})
	d.log.Debug("checkpoint committed", "event", "checkpoint", d.cfg.KeyAttr, l.Key, "version", l.Version,
		"position", res.Position, "items", items, "elapsed_ms", elapsed.Milliseconds())
	return items, caughtUp, released, nil
}

// movedOr tells a batch that collided with a late commit of its own claim
// from a real failure. When an earlier attempt's commit (whose outcome the
// worker could not learn) lands after the retry's fence read the old
// checkpoint, the retry writes the same output again and usually fails on
// the output's unique key (23505) before it reaches the checkpoint
// compare-and-set. That is a moved checkpoint, to be retried from the new
// position, not a processing error that counts towards quarantine: so a
// failed batch re-reads the checkpoint, and if it moved under the same
// claim the error becomes partition.ErrCheckpointMoved. Errors that are
// already transient, fenced or caused by the lease ending are left alone.
func (d *Distributor) movedOr(ctx context.Context, l partition.Lease, from int64, err error) error {
	if ctx.Err() != nil || dberr.Transient(err) || errors.Is(err, partition.ErrFenced) {
		return err
	}
	rctx, cancel := context.WithTimeout(context.Background(), d.cfg.StaleAfter/2)
	defer cancel()
	v, pos, rerr := d.store.Progress(rctx, l.Key)
	if rerr != nil || v != l.Version || pos == from {
		return err
	}
	return fmt.Errorf("%w: it is at %d, not %d (a late commit of this claim landed): %w",
		partition.ErrCheckpointMoved, pos, from, err)
}

// resolveCommit re-reads a partition after a commit whose outcome is
// unknown: it applied if the checkpoint is at position under the claim's
// version, or, for a batch that also released the partition, under the
// version its release made (the next one: nobody else can have claimed it
// while the lease was live).
func (d *Distributor) resolveCommit(l partition.Lease, position int64, released bool) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.StaleAfter/2)
	defer cancel()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		v, pos, err := d.store.Progress(ctx, l.Key)
		if err == nil {
			switch {
			case released && v == l.Version+1:
				return pos == position, nil
			case v != l.Version:
				return false, partition.ErrFenced
			}
			return pos == position, nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return false, lastErr
		case <-d.cfg.Clock.After(d.cfg.Heartbeat / 4):
		}
	}
	return false, lastErr
}

func (d *Distributor) process(ctx context.Context, b *Batch) (res Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("processor panicked on %s: %v", b.Lease, r)
		}
	}()
	res, err = d.proc.Process(ctx, b)
	if err != nil {
		err = fmt.Errorf("processing %s: %w", b.Lease, err)
	}
	return res, err
}

func causeOr(ctx context.Context, err error) error {
	if c := context.Cause(ctx); c != nil && !errors.Is(err, c) {
		return fmt.Errorf("%w (%w)", err, c)
	}
	return err
}

func (d *Distributor) lost(h *held, cause error) {
	l := h.lease
	d.hb.Release(l)
	d.record(partition.EventLost, l.Lease, cause)
	d.emit(Event{Kind: EventLost, Key: l.Key, Version: l.Version, Err: cause})
	d.log.Warn("partition lost", "event", "lost", d.cfg.KeyAttr, l.Key, "version", l.Version, "cause", cause)
}

// release hands the partition back in the database (fenced by version) and
// stops tracking it.
func (d *Distributor) release(h *held, reason string) {
	l := h.lease
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.StaleAfter/2)
	defer cancel()
	d.hb.Release(l)
	ctx, span := tracer.Start(ctx, "baton.release", d.leaseAttrs(l.Lease), trace.WithAttributes(attribute.String("baton.reason", reason)))
	var released []string
	var err error
	defer func() { endSpan(span, err) }()
	for {
		// Releasing twice is harmless: it is fenced by version, so a retry
		// after an attempt that applied unseen finds nothing to release.
		released, err = d.store.ReleaseFor(ctx, d.worker.InstanceID, reason, []partition.Lease{l.Lease})
		if err == nil || !dberr.Transient(err) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-d.cfg.Clock.After(d.cfg.Heartbeat / 4):
		}
	}
	if err != nil {
		err = fmt.Errorf("releasing %s: %w", l.Lease, err)
		d.emit(Event{Kind: EventLost, Key: l.Key, Version: l.Version, Err: err})
		d.log.Warn("release failed; the lease will expire instead", "event", "lost", d.cfg.KeyAttr, l.Key,
			"version", l.Version, "error", err)
		return
	}
	if len(released) == 0 {
		d.emit(Event{Kind: EventLost, Key: l.Key, Version: l.Version, Err: partition.ErrFenced})
		return
	}
	d.emit(Event{Kind: EventReleased, Key: l.Key, Version: l.Version, Reason: reason})
	d.log.Info("released partition", "event", "released", d.cfg.KeyAttr, l.Key, "version", l.Version, "reason", reason)
}

func (d *Distributor) fail(h *held, cause error) {
	l := h.lease
	d.hb.Release(l)
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.StaleAfter/2)
	defer cancel()
	r, err := d.store.Fail(ctx, d.worker.InstanceID, l.Lease, cause.Error(), d.cfg.Backoff, d.cfg.MaxBackoff, d.cfg.MaxAttempts)
	if err != nil {
		d.emit(Event{Kind: EventLost, Key: l.Key, Version: l.Version,
			Err: fmt.Errorf("recording failure of %s (%v): %w", l.Lease, cause, err)})
		d.log.Error("processing failed and the failure could not be recorded; the lease will expire",
			"event", "lost", d.cfg.KeyAttr, l.Key, "version", l.Version, "error", cause, "record_error", err)
		return
	}
	kind := EventFailed
	if r.Quarantined {
		kind = EventQuarantined
	}
	d.emit(Event{Kind: kind, Key: l.Key, Version: l.Version, Err: cause, Attempts: r.Attempts})
	if r.Quarantined {
		d.log.Error("partition quarantined after repeated failures", "event", "failed", d.cfg.KeyAttr, l.Key,
			"version", l.Version, "attempts", r.Attempts, "error", cause)
		return
	}
	d.log.Warn("processing failed; backing off", "event", "failed", d.cfg.KeyAttr, l.Key, "version", l.Version,
		"attempts", r.Attempts, "retry_in_ms", r.RetryAfter.Milliseconds(), "error", cause)
}
