package schedule

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/uptrace/bun"
	"go.uber.org/goleak"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/heartbeat"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/partition"
)

// The tests leave no goroutine behind (the server is torn down first).
func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.WithServer(m)) }

// offsetClock is the real clock off by a fixed amount, like a worker whose
// system clock is wrong.
type offsetClock struct {
	clockwork.Clock
	off time.Duration
}

func (c offsetClock) Now() time.Time { return c.Clock.Now().Add(c.off) }

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func testConfig(id string, off time.Duration) Config {
	return Config{
		InstanceID: id, Heartbeat: 100 * time.Millisecond, StaleAfter: time.Second, Confirm: 2,
		PollInterval: 100 * time.Millisecond, ShutdownTimeout: 5 * time.Second,
		Clock: offsetClock{clockwork.NewRealClock(), off}, Logger: quietLogger(),
	}
}

func createRunLog(t *testing.T, db *dbconn.DB) {
	t.Helper()
	if _, err := db.Exec(`CREATE TABLE run_log (job text, slot timestamptz, worker text, fence bigint,
		takeover boolean, at timestamptz DEFAULT clock_timestamp())`); err != nil {
		t.Fatal(err)
	}
}

// logRun records the run in run_log behind the run's fence.
func logRun(db *dbconn.DB) RunFunc {
	return func(ctx context.Context, r *Run) error {
		return db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			if err := r.Check(ctx, tx); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO run_log (job, slot, worker, fence, takeover) VALUES (?, ?, ?, ?, ?)`,
				r.Job, r.Slot, r.Worker, r.Fence, r.Takeover)
			return err
		})
	}
}

type logged struct {
	Slot     time.Time
	Worker   string
	Fence    int64
	Takeover bool
}

func runLog(t *testing.T, db *dbconn.DB, job string) []logged {
	t.Helper()
	rows, err := db.Query(`SELECT slot, worker, fence, takeover FROM run_log WHERE job = ? ORDER BY at`, job)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []logged
	for rows.Next() {
		var l logged
		if err := rows.Scan(&l.Slot, &l.Worker, &l.Fence, &l.Takeover); err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

// startSchedulers runs one scheduler per config, each with job registered,
// and returns a function that stops them all and waits.
func startSchedulers(t *testing.T, db *dbconn.DB, job Job, cfgs ...Config) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, cfg := range cfgs {
		s, err := New(db, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Register(ctx, job); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Run(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

func waitRuns(t *testing.T, db *dbconn.DB, job string, n int64) {
	t.Helper()
	testutil.Eventually(t, 60*time.Second, fmt.Sprintf("%d runs of job %s", n, job), func() error {
		var runs int64
		if err := db.QueryRow(`SELECT runs FROM baton.jobs WHERE name = ?`, job).Scan(&runs); err != nil {
			t.Fatal(err)
		}
		if runs < n {
			return fmt.Errorf("%d runs", runs)
		}
		return nil
	})
}

// Workers whose clocks are minutes apart run every slot of a catch-up job
// exactly once, in order: slots come from the database clock.
func TestSkewedWorkerClocksRunOneRunPerSlot(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	createRunLog(t, db)
	job := Job{Definition: Definition{Name: "tick", Every: 200 * time.Millisecond, Missed: MissedCatchUp}, Run: logRun(db)}
	// Started at different moments, with clocks minutes apart.
	stop1 := startSchedulers(t, db, job, testConfig("early#1", -7*time.Minute))
	waitRuns(t, db, "tick", 3)
	stop2 := startSchedulers(t, db, job, testConfig("exact#1", 0))
	waitRuns(t, db, "tick", 6)
	stop3 := startSchedulers(t, db, job, testConfig("late#1", 5*time.Minute))
	waitRuns(t, db, "tick", 15)
	stop1()
	stop2()
	stop3()

	runs := runLog(t, db, "tick")
	if len(runs) < 15 {
		t.Fatalf("%d runs logged, want at least 15", len(runs))
	}
	workers := map[string]int{}
	for _, r := range runs {
		workers[r.Worker]++
	}
	t.Logf("runs by worker: %v", workers)
	for i, r := range runs {
		if r.Slot.UnixMicro()%(200*time.Millisecond).Microseconds() != 0 {
			t.Errorf("run %d: slot %s is not a multiple of the interval", i, r.Slot)
		}
		if i > 0 && !r.Slot.Equal(runs[i-1].Slot.Add(200*time.Millisecond)) {
			t.Errorf("run %d: slot %s follows %s: want every slot once, in order", i, r.Slot, runs[i-1].Slot)
		}
	}
}

// A skip job that missed many slots runs only the latest due one.
func TestSkipRunsTheLatestDueSlotOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	createRunLog(t, db)
	ctx := context.Background()
	if err := NewStore(db, "").Add(ctx, Definition{Name: "daily", Every: time.Minute}); err != nil {
		t.Fatal(err)
	}
	// An hour of slots missed.
	if _, err := db.Exec(`UPDATE baton.jobs SET next_run = date_trunc('minute', now()) - interval '1 hour' WHERE name = 'daily'`); err != nil {
		t.Fatal(err)
	}
	var latest time.Time
	if err := db.QueryRow(`SELECT date_trunc('minute', now()) FROM baton.jobs`).Scan(&latest); err != nil {
		t.Fatal(err)
	}
	startSchedulers(t, db, Job{Definition: Definition{Name: "daily", Every: time.Minute}, Run: logRun(db)},
		testConfig("a#1", 0), testConfig("b#1", 0))
	waitRuns(t, db, "daily", 1)
	runs := runLog(t, db, "daily")
	if len(runs) != 1 {
		t.Fatalf("%d runs, want 1: %+v", len(runs), runs)
	}
	// The latest slot at or before now: the minute the test started in, or
	// the next one if the minute turned meanwhile.
	if d := runs[0].Slot.Sub(latest.UTC()); d != 0 && d != time.Minute {
		t.Fatalf("ran slot %s, want the latest due slot %s", runs[0].Slot, latest)
	}
	var next time.Time
	if err := db.QueryRow(`SELECT next_run FROM baton.jobs`).Scan(&next); err != nil {
		t.Fatal(err)
	}
	if !next.Equal(runs[0].Slot.Add(time.Minute)) {
		t.Fatalf("next_run = %s, want %s", next, runs[0].Slot.Add(time.Minute))
	}
}

// A job left RUNNING by a worker that died is taken over once its lease
// has expired, and the same slot runs again under a higher fence.
func TestStuckRunningJobIsRecoveredByLeaseExpiry(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	createRunLog(t, db)
	ctx := context.Background()
	def := Definition{Name: "stuck", Every: time.Hour, Missed: MissedCatchUp}
	if err := NewStore(db, "").Add(ctx, def); err != nil {
		t.Fatal(err)
	}
	var slot time.Time
	if err := db.QueryRow(`
		UPDATE baton.jobs SET state = 'running', owner = 'dead#1', version = 7, running_slot = date_trunc('hour', now()),
		       last_run_started = now() - interval '2 seconds', run_deadline = now() + interval '1 hour',
		       lease_expires_at = now() + interval '300 milliseconds', next_run = date_trunc('hour', now())
		RETURNING running_slot`).Scan(&slot); err != nil {
		t.Fatal(err)
	}
	startSchedulers(t, db, Job{Definition: def, Run: logRun(db)}, testConfig("alive#1", 0))
	waitRuns(t, db, "stuck", 1)
	runs := runLog(t, db, "stuck")
	if len(runs) != 1 || !runs[0].Slot.Equal(slot) || !runs[0].Takeover || runs[0].Fence != 8 || runs[0].Worker != "alive#1" {
		t.Fatalf("runs = %+v, want one takeover of slot %s at fence 8 by alive#1", runs, slot)
	}
	var state string
	var next time.Time
	if err := db.QueryRow(`SELECT state, next_run FROM baton.jobs`).Scan(&state, &next); err != nil {
		t.Fatal(err)
	}
	if state != "idle" || !next.Equal(slot.Add(time.Hour)) {
		t.Fatalf("after recovery: state %s next_run %s, want idle and %s", state, next, slot.Add(time.Hour))
	}
}

// A run whose job was taken over can neither write behind its fence nor
// record its completion.
func TestTakenOverRunIsFenced(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	def := Definition{Name: "fenced", Every: time.Hour}
	if err := NewStore(pgtest.Handle(db), "").Add(ctx, def); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE baton.jobs SET next_run = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	a := &runStore{db: db, owner: "a#1", ttl: time.Second}
	cl, err := a.claim(ctx, candidate{name: "fenced", version: 0})
	if err != nil || cl == nil {
		t.Fatalf("claim: %v, %v", cl, err)
	}
	// Another claim while a's lease is live loses.
	b := &runStore{db: db, owner: "b#1", ttl: time.Second}
	if cl2, err := b.claim(ctx, candidate{name: "fenced", version: cl.version}); err != nil || cl2 != nil {
		t.Fatalf("claim of a held job: %+v, %v; want nothing", cl2, err)
	}
	// a's lease runs out; b takes over.
	if _, err := db.Exec(`UPDATE baton.jobs SET lease_expires_at = now()`); err != nil {
		t.Fatal(err)
	}
	cl2, err := b.claim(ctx, candidate{name: "fenced", version: cl.version})
	if err != nil || cl2 == nil || !cl2.takeover || !cl2.slot.Equal(cl.slot) || cl2.version != cl.version+1 {
		t.Fatalf("takeover: %+v, %v", cl2, err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := a.fence(ctx, tx, "fenced", cl.version, cl.slot); !errors.Is(err, partition.ErrFenced) {
		t.Fatalf("stale fence: %v, want partition.ErrFenced", err)
	}
	if err := a.complete(ctx, "fenced", cl.version, cl.slot, cl.slot.Add(time.Hour), "ok", ""); !errors.Is(err, partition.ErrFenced) {
		t.Fatalf("stale completion: %v, want partition.ErrFenced", err)
	}
	if err := b.complete(ctx, "fenced", cl2.version, cl2.slot, cl2.slot.Add(time.Hour), "ok", ""); err != nil {
		t.Fatalf("current completion: %v", err)
	}
}

// A run that reaches lock-at-most-for is cancelled and recorded as failed.
func TestLockAtMostForStopsTheRun(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	hung := make(chan error, 1)
	job := Job{Definition: Definition{Name: "hang", Every: time.Hour, LockAtMostFor: 300 * time.Millisecond},
		Run: func(ctx context.Context, r *Run) error {
			<-ctx.Done()
			hung <- context.Cause(ctx)
			return ctx.Err()
		}}
	if err := NewStore(db, "").Add(context.Background(), job.Definition); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE baton.jobs SET next_run = now()`); err != nil {
		t.Fatal(err)
	}
	startSchedulers(t, db, job, testConfig("a#1", 0))
	if cause := <-hung; !errors.Is(cause, ErrLockAtMostFor) {
		t.Fatalf("run cancelled with %v, want ErrLockAtMostFor", cause)
	}
	waitRuns(t, db, "hang", 1)
	var result, lastErr string
	if err := db.QueryRow(`SELECT last_result, last_error FROM baton.jobs`).Scan(&result, &lastErr); err != nil {
		t.Fatal(err)
	}
	if result != "failed" || lastErr == "" {
		t.Fatalf("last_result %q last_error %q, want failed with the cause", result, lastErr)
	}
}

// A leader-mode job stays with its worker between runs; a lock-mode job is
// released after each.
func TestModesLeaderKeepsLockReleases(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	createRunLog(t, db)
	leader := Job{Definition: Definition{Name: "lead", Every: 200 * time.Millisecond, Mode: ModeLeader}, Run: logRun(db)}
	lock := Job{Definition: Definition{Name: "lock", Every: 200 * time.Millisecond, Mode: ModeLock}, Run: logRun(db)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for i := range 3 {
		s, err := New(db, testConfig(fmt.Sprintf("w%d#1", i), 0))
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range []Job{leader, lock} {
			if err := s.Register(ctx, j); err != nil {
				t.Fatal(err)
			}
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = s.Run(ctx) }()
	}
	waitRuns(t, db, "lead", 8)
	var owner, state string
	var lease bool
	if err := db.QueryRow(`SELECT coalesce(owner, ''), state, lease_expires_at > now() FROM baton.jobs WHERE name = 'lock'`).Scan(&owner, &state, &lease); err != nil {
		t.Fatal(err)
	}
	if state == "idle" && (owner != "" || lease) {
		t.Errorf("idle lock-mode job still held by %q (lease live %v)", owner, lease)
	}
	cancel()
	wg.Wait()
	runs := runLog(t, db, "lead")
	for _, r := range runs[1:] {
		if r.Worker != runs[0].Worker || r.Fence != runs[0].Fence {
			t.Fatalf("leader job moved: %+v then %+v", runs[0], r)
		}
	}
	// The stop released the leader job.
	if err := db.QueryRow(`SELECT coalesce(owner, '') FROM baton.jobs WHERE name = 'lead'`).Scan(&owner); err != nil {
		t.Fatal(err)
	}
	if owner != "" {
		t.Fatalf("leader job still owned by %s after a graceful stop", owner)
	}
}

// Trigger runs a job once now, beside its schedule.
func TestTriggerRunsOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	createRunLog(t, db)
	job := Job{Definition: Definition{Name: "nightly", Cron: "0 3 * * *"}, Run: logRun(db)}
	ctx := context.Background()
	if err := NewStore(db, "").Add(ctx, job.Definition); err != nil {
		t.Fatal(err)
	}
	at, err := NewStore(db, "").Trigger(ctx, "nightly")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewStore(db, "").Trigger(ctx, "nope"); !errors.Is(err, partition.ErrNotFound) {
		t.Fatalf("trigger of unknown job: %v", err)
	}
	var next0 time.Time
	if err := db.QueryRow(`SELECT next_run FROM baton.jobs`).Scan(&next0); err != nil {
		t.Fatal(err)
	}
	startSchedulers(t, db, job, testConfig("a#1", 0))
	waitRuns(t, db, "nightly", 1)
	runs := runLog(t, db, "nightly")
	if len(runs) != 1 || !runs[0].Slot.Equal(at) {
		t.Fatalf("runs %+v, want one at the trigger time %s", runs, at)
	}
	st, err := NewStore(db, "").List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 || !st[0].NextRun.Equal(next0.UTC()) || st[0].Runs != 1 || st[0].Schedule != "cron 0 3 * * *" {
		t.Fatalf("list after trigger: %+v (next_run before %s)", st, next0)
	}
}

// A run whose job is taken from it (here: by a write that bumps the
// version, as a takeover does) is cancelled with ErrOwnershipLost and its
// completion is not recorded.
func TestLostLeaseCancelsTheRun(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	started := make(chan struct{})
	cause := make(chan error, 1)
	job := Job{Definition: Definition{Name: "long", Every: time.Hour},
		Run: func(ctx context.Context, r *Run) error {
			close(started)
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return ctx.Err()
		}}
	if err := NewStore(db, "").Add(context.Background(), job.Definition); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE baton.jobs SET next_run = now()`); err != nil {
		t.Fatal(err)
	}
	startSchedulers(t, db, job, testConfig("a#1", 0))
	<-started
	if _, err := db.Exec(`UPDATE baton.jobs SET version = version + 1, owner = 'thief#1'`); err != nil {
		t.Fatal(err)
	}
	if c := <-cause; !errors.Is(c, heartbeat.ErrOwnershipLost) {
		t.Fatalf("run cancelled with %v, want ErrOwnershipLost", c)
	}
	var runs int64
	var state string
	if err := db.QueryRow(`SELECT runs, state FROM baton.jobs`).Scan(&runs, &state); err != nil {
		t.Fatal(err)
	}
	if runs != 0 || state != "running" {
		t.Fatalf("runs %d state %s: the lost run must not complete", runs, state)
	}
}

// expire mode keeps the job until its lease runs out; lock-at-least-for
// keeps the next run from starting too soon after the last one started.
func TestExpireModeAndLockAtLeastFor(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	for _, d := range []Definition{
		{Name: "exp", Every: time.Second, Mode: ModeExpire},
		{Name: "least", Every: time.Second, LockAtLeastFor: time.Hour},
	} {
		if err := NewStore(pgtest.Handle(db), "").Add(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`UPDATE baton.jobs SET next_run = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	a := &runStore{db: db, owner: "a#1", ttl: time.Minute}
	b := &runStore{db: db, owner: "b#1", ttl: time.Minute}
	for _, name := range []string{"exp", "least"} {
		cl, err := a.claim(ctx, candidate{name: name, version: 0})
		if err != nil || cl == nil {
			t.Fatalf("%s: claim %+v %v", name, cl, err)
		}
		// The next slot is already due when the run completes.
		if err := a.complete(ctx, name, cl.version, cl.slot, cl.slot.Add(time.Second), "ok", ""); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(`UPDATE baton.jobs SET next_run = now() - interval '1 second' WHERE name = ?`, name); err != nil {
			t.Fatal(err)
		}
		var version int64
		if err := db.QueryRow(`SELECT version FROM baton.jobs WHERE name = ?`, name).Scan(&version); err != nil {
			t.Fatal(err)
		}
		cands, _, err := b.candidates(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cands {
			if c.name == name {
				t.Errorf("%s is claimable by another worker right after a run", name)
			}
		}
		if cl2, err := b.claim(ctx, candidate{name: name, version: version}); err != nil || cl2 != nil {
			t.Errorf("%s: claimed right after a run: %+v %v", name, cl2, err)
		}
	}
	// Once the expire-mode lease has run out, anyone may run the job.
	if _, err := db.Exec(`UPDATE baton.jobs SET lease_expires_at = now() WHERE name = 'exp'`); err != nil {
		t.Fatal(err)
	}
	var version int64
	if err := db.QueryRow(`SELECT version FROM baton.jobs WHERE name = 'exp'`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if cl, err := b.claim(ctx, candidate{name: "exp", version: version}); err != nil || cl == nil || cl.version != version+1 {
		t.Fatalf("claim after the lease ran out: %+v %v", cl, err)
	}
	// Once lock-at-least-for has passed since the last start, likewise.
	if _, err := db.Exec(`UPDATE baton.jobs SET last_run_started = now() - interval '1 hour' WHERE name = 'least'`); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT version FROM baton.jobs WHERE name = 'least'`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if cl, err := b.claim(ctx, candidate{name: "least", version: version}); err != nil || cl == nil {
		t.Fatalf("claim after lock-at-least-for: %+v %v", cl, err)
	}
}
