package keepalive_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/batonhq/baton/internal/leaseinfo"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/batonhq/baton/heartbeat"
	"github.com/batonhq/baton/internal/keepalive"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/partition"
)

// The tests leave no goroutine behind (the server is torn down first).
func TestMain(m *testing.M) {
	if os.Getenv(stoppedBeatEnv) == "1" {
		os.Exit(stoppedBeat())
	}
	goleak.VerifyTestMain(pgtest.WithServer(m))
}

// fakeRenewer is a scripted Renewer: it renews every lease it is given
// unless told to fail, and can be told that a lease belongs to someone else.
type fakeRenewer struct {
	mu      sync.Mutex
	fail    error
	stolen  map[string]bool
	locked  map[string]time.Duration // held by another transaction: time left
	fresh   map[string]time.Duration // left as is, enough time left: time left
	renews  int
	inspect func([]partition.Lease) ([]leaseinfo.Owned, error)
}

func (f *fakeRenewer) Renew(_ context.Context, leases []partition.Lease) ([]leaseinfo.Renewal, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.renews++
	if f.fail != nil {
		return nil, f.fail
	}
	var out []leaseinfo.Renewal
	for _, l := range leases {
		if left, ok := f.locked[l.Key]; ok {
			out = append(out, leaseinfo.Renewal{Lease: l, Locked: true, Remaining: left})
		} else if left, ok := f.fresh[l.Key]; ok {
			out = append(out, leaseinfo.Renewal{Lease: l, Fresh: true, Remaining: left})
		} else if !f.stolen[l.Key] {
			out = append(out, leaseinfo.Renewal{Lease: l})
		}
	}
	return out, nil
}

func (f *fakeRenewer) Inspect(_ context.Context, leases []partition.Lease) ([]leaseinfo.Owned, error) {
	if f.inspect != nil {
		return f.inspect(leases)
	}
	return nil, errors.New("no inspect scripted")
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newService(t *testing.T, r keepalive.Renewer, clock clockwork.Clock) *keepalive.Service {
	t.Helper()
	s, err := keepalive.New(r, keepalive.Config{
		Interval: time.Second, StaleAfter: 10 * time.Second, SafetyMargin: 2 * time.Second,
		Confirm: 3, Clock: clock, Logger: quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func TestConfirmNeedsConsecutiveRenewals(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	r := &fakeRenewer{}
	s := newService(t, r, clock)
	ctx := context.Background()
	l := s.Track(ctx, partition.Lease{Key: "k", Version: 7}, clock.Now(), true)
	fresh := s.Track(ctx, partition.Lease{Key: "released-before", Version: 2}, clock.Now(), false)
	if !closed(fresh.Confirmed()) {
		t.Fatal("a lease that needs no confirmation must be confirmed at once")
	}

	s.Beat(ctx)
	s.Beat(ctx)
	if closed(l.Confirmed()) {
		t.Fatal("confirmed after 2 renewals, want 3")
	}
	// A failed renewal breaks the streak.
	r.fail = errors.Join(&pgconn.PgError{Code: "57014", Message: "canceling statement due to statement timeout"})
	s.Beat(ctx)
	r.fail = nil
	s.Beat(ctx)
	s.Beat(ctx)
	if closed(l.Confirmed()) {
		t.Fatalf("confirmed with streak %d after a failure, want the count to restart", l.Streak())
	}
	s.Beat(ctx)
	if !closed(l.Confirmed()) {
		t.Fatalf("not confirmed after 3 consecutive renewals (streak %d)", l.Streak())
	}
	if l.Context().Err() != nil {
		t.Fatal("a renewed lease's context must stay alive")
	}
}

func TestLostLeaseCancelsWithCause(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	r := &fakeRenewer{stolen: map[string]bool{"taken": true}}
	s := newService(t, r, clock)
	ctx := context.Background()
	kept := s.Track(ctx, partition.Lease{Key: "kept", Version: 1}, clock.Now(), false)
	taken := s.Track(ctx, partition.Lease{Key: "taken", Version: 1}, clock.Now(), false)
	s.Beat(ctx)
	if !errors.Is(context.Cause(taken.Context()), heartbeat.ErrOwnershipLost) {
		t.Fatalf("cause = %v, want ErrOwnershipLost", context.Cause(taken.Context()))
	}
	if kept.Context().Err() != nil {
		t.Fatal("the other lease must survive")
	}
	if n := len(s.Tracked()); n != 1 {
		t.Fatalf("%d leases tracked after the loss, want 1", n)
	}
}

// A lost lease is logged under the configured key attribute.
func TestLostLeaseLogsTheKeyAttr(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	var logged bytes.Buffer
	s, err := keepalive.New(&fakeRenewer{stolen: map[string]bool{"c-17": true}}, keepalive.Config{
		Clock: clock, KeyAttr: "contract_id",
		Logger: slog.New(slog.NewJSONHandler(&logged, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s.Track(ctx, partition.Lease{Key: "c-17", Version: 1}, clock.Now(), false)
	s.Beat(ctx)
	var line map[string]any
	if err := json.Unmarshal(logged.Bytes(), &line); err != nil {
		t.Fatalf("log %q: %v", logged.String(), err)
	}
	if line["contract_id"] != "c-17" || line["event"] != "lost" {
		t.Errorf("log line %v; want event lost with contract_id c-17", line)
	}
}

// A lease its owner is releasing in a transaction of its own (a batch that
// caught up) and that a renewal no longer finds is left to the owner: its
// context stays alive (cancelling it could interrupt the reply to the
// commit) until the owner releases it. Once the owner clears the mark (the
// transaction did not commit), a missing lease is a loss again.
func TestReleasingLeaseIsLeftToItsOwner(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	r := &fakeRenewer{stolen: map[string]bool{"done": true, "undone": true}}
	s := newService(t, r, clock)
	ctx := context.Background()
	done := s.Track(ctx, partition.Lease{Key: "done", Version: 1}, clock.Now(), false)
	undone := s.Track(ctx, partition.Lease{Key: "undone", Version: 1}, clock.Now(), false)
	done.SetReleasing(true)
	undone.SetReleasing(true)
	undone.SetReleasing(false)
	s.Beat(ctx)
	if err := done.Context().Err(); err != nil {
		t.Fatalf("releasing lease ended by a renewal: %v (cause %v)", err, context.Cause(done.Context()))
	}
	if !errors.Is(context.Cause(undone.Context()), heartbeat.ErrOwnershipLost) {
		t.Fatalf("lease whose release was undone: cause = %v, want ErrOwnershipLost", context.Cause(undone.Context()))
	}
	s.Release(done)
	if !errors.Is(context.Cause(done.Context()), heartbeat.ErrReleased) {
		t.Fatalf("released lease: cause = %v, want ErrReleased", context.Cause(done.Context()))
	}
	if n := len(s.Tracked()); n != 0 {
		t.Fatalf("%d leases tracked, want 0", n)
	}
}

// A worker cut off from the database stops processing by its own clock
// before the lease ends, even though no renewal ever returns.
func TestLocalDeadlineStopsCutOffWorker(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	r := &fakeRenewer{fail: &pgconn.PgError{Code: "08006", Message: "connection failure"}}
	s := newService(t, r, clock)
	ctx := context.Background()
	claimed := clock.Now()
	l := s.Track(ctx, partition.Lease{Key: "k", Version: 1}, claimed, false)
	for range 7 {
		clock.Advance(time.Second)
		s.Beat(ctx)
	}
	if l.Context().Err() != nil {
		t.Fatal("stopped 7s into a 10s lease with a 2s margin; want it alive until 8s")
	}
	clock.Advance(time.Second) // 8s: stale_after − margin
	select {
	case <-l.Context().Done():
	case <-time.After(testutil.WaitTimeout(5 * time.Second)):
		t.Fatal("lease not cancelled at its local deadline")
	}
	if !errors.Is(context.Cause(l.Context()), heartbeat.ErrLeaseExpired) {
		t.Fatalf("cause = %v, want ErrLeaseExpired", context.Cause(l.Context()))
	}
}

// A renewal that applied but whose reply was lost is resolved by re-reading
// the database: the lease is kept, and its deadline follows the lease the
// database actually holds. This uses the real store.
func TestUnknownOutcomeHeartbeatIsResolvedByReRead(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	store := taskstore.NewStore(db, "")
	ctx := context.Background()
	if _, err := db.Exec(`INSERT INTO baton.tasks (partition_key, available) VALUES ('k', 10)`); err != nil {
		t.Fatal(err)
	}
	w := taskstore.Worker{InstanceID: "w#1", Name: "w"}
	cands, err := store.Candidates(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	won, err := store.Claim(ctx, w.InstanceID, 10*time.Second, cands)
	if err != nil || len(won) != 1 {
		t.Fatalf("claim = %v, %v", won, err)
	}
	var before time.Time
	if err := db.QueryRow(`SELECT lease_expires_at FROM baton.tasks`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	r := &lossyRenewer{store: store, worker: w}
	clock := clockwork.NewFakeClock()
	s := newService(t, r, clock)
	l := s.Track(ctx, won[0].Lease, clock.Now(), true)
	s.Beat(ctx)
	if r.applied != 1 {
		t.Fatalf("renewal applied %d times, want 1", r.applied)
	}
	var after time.Time
	if err := db.QueryRow(`SELECT lease_expires_at FROM baton.tasks`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if !after.After(before) {
		t.Fatal("the renewal did not apply in the database")
	}
	if l.Context().Err() != nil {
		t.Fatalf("lease dropped after an unknown-outcome renewal: %v", context.Cause(l.Context()))
	}
	if l.Streak() != 1 {
		t.Fatalf("streak %d, want 1: the re-read showed the lease still held", l.Streak())
	}

	// Someone else takes the partition over; the next unknown outcome
	// re-reads and finds it gone.
	if _, err := db.Exec(`UPDATE baton.tasks SET version = version + 1, owner = 'other#2'`); err != nil {
		t.Fatal(err)
	}
	s.Beat(ctx)
	if !errors.Is(context.Cause(l.Context()), heartbeat.ErrOwnershipLost) {
		t.Fatalf("cause = %v, want ErrOwnershipLost", context.Cause(l.Context()))
	}
}

// lossyRenewer applies every renewal and then reports a lost connection.
type lossyRenewer struct {
	store   *taskstore.Store
	worker  taskstore.Worker
	applied int
}

func (r *lossyRenewer) Renew(ctx context.Context, leases []partition.Lease) ([]leaseinfo.Renewal, error) {
	if _, err := r.store.HeartbeatBelow(ctx, r.worker, 10*time.Second, 10*time.Second+time.Hour, leases); err != nil {
		return nil, err
	}
	r.applied++
	return nil, io.ErrUnexpectedEOF
}

func (r *lossyRenewer) Inspect(ctx context.Context, leases []partition.Lease) ([]leaseinfo.Owned, error) {
	return r.store.Inspect(ctx, r.worker.InstanceID, leases)
}

func TestValidateRejectsImpossibleTimings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  keepalive.Config
	}{
		{"stale below 3 beats", keepalive.Config{Interval: time.Second, StaleAfter: 2 * time.Second}},
		{"margin eats lease", keepalive.Config{Interval: time.Second, StaleAfter: 5 * time.Second, SafetyMargin: 4500 * time.Millisecond}},
		{"one renewal of room", keepalive.Config{Interval: 200 * time.Millisecond, StaleAfter: 800 * time.Millisecond, SafetyMargin: 594 * time.Millisecond}},
		{"negative interval", keepalive.Config{Interval: -time.Second}},
		{"confirm zero", keepalive.Config{Confirm: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.cfg.Validate(); err == nil {
				t.Errorf("Validate(%+v) = nil", tc.cfg)
			}
		})
	}
}

func TestStartStopRenewsOnTicks(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	beats := make(chan int, 10)
	s, err := keepalive.New(&fakeRenewer{}, keepalive.Config{
		Interval: time.Second, StaleAfter: 10 * time.Second, Clock: clock, Logger: quiet(),
		OnBeat: func(err error, _ time.Duration, renewed int) { beats <- renewed },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	l := s.Track(context.Background(), partition.Lease{Key: "k", Version: 1}, clock.Now(), true)
	for i := 0; i < 3; i++ {
		if err := clock.BlockUntilContext(context.Background(), 2); err != nil { // ticker + deadline timer
			t.Fatal(err)
		}
		clock.Advance(time.Second)
		select {
		case n := <-beats:
			if n != 1 {
				t.Fatalf("tick %d renewed %d leases, want 1", i+1, n)
			}
		case <-time.After(testutil.WaitTimeout(5 * time.Second)):
			t.Fatalf("tick %d did not renew", i+1)
		}
	}
	select {
	case <-l.Confirmed():
	case <-time.After(testutil.WaitTimeout(5 * time.Second)):
		t.Fatal("not confirmed after 3 ticks")
	}
	s.Stop()
	s.Stop() // idempotent
}

// A lease whose row another transaction holds is neither renewed nor lost:
// the others are renewed, it keeps the time it had left (its local
// deadline follows the database's account), its confirmation streak
// restarts, and it ends only if that time runs out before a renewal.
func TestLockedRowIsSkippedNotLost(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	r := &fakeRenewer{locked: map[string]time.Duration{"busy": 5 * time.Second}}
	s := newService(t, r, clock) // lease 10s, margin 2s
	ctx := context.Background()
	busy := s.Track(ctx, partition.Lease{Key: "busy", Version: 1}, clock.Now(), true)
	free := s.Track(ctx, partition.Lease{Key: "free", Version: 1}, clock.Now(), false)
	s.Beat(ctx)
	s.Beat(ctx)
	if busy.Context().Err() != nil || free.Context().Err() != nil {
		t.Fatal("a skipped renewal ended a lease")
	}
	if busy.Streak() != 0 {
		t.Fatalf("skipped lease has streak %d, want 0", busy.Streak())
	}
	// 5s left by the database, 2s margin: it ends locally after 3s unless
	// renewed; the free lease, renewed, lives on.
	clock.Advance(2900 * time.Millisecond)
	if busy.Context().Err() != nil {
		t.Fatal("the skipped lease ended before the time it had left")
	}
	clock.Advance(200 * time.Millisecond)
	select {
	case <-busy.Context().Done():
	case <-time.After(testutil.WaitTimeout(5 * time.Second)):
		t.Fatal("skipped lease not ended at its local deadline")
	}
	if !errors.Is(context.Cause(busy.Context()), heartbeat.ErrLeaseExpired) {
		t.Fatalf("skipped lease past its time: cause %v, want ErrLeaseExpired", context.Cause(busy.Context()))
	}
	if free.Context().Err() != nil {
		t.Fatal("the renewed lease ended")
	}

	// Once the lock is gone, renewals resume and confirm as usual.
	again := s.Track(ctx, partition.Lease{Key: "busy", Version: 2}, clock.Now(), true)
	r.mu.Lock()
	r.locked = nil
	r.mu.Unlock()
	for range 3 {
		s.Beat(ctx)
	}
	if !again.IsConfirmed() {
		t.Fatalf("not confirmed after 3 renewals (streak %d)", again.Streak())
	}
}

// A lease the renewer checked but left as is (Fresh, plenty of time left)
// counts towards confirmation, and its local deadline follows the time the
// database says it has left, not a full lease: it is never trusted past its
// real end.
func TestFreshLeaseConfirmsAndKeepsItsRealDeadline(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	r := &fakeRenewer{fresh: map[string]time.Duration{"k": 6 * time.Second}}
	s := newService(t, r, clock) // lease 10s, margin 2s
	ctx := context.Background()
	l := s.Track(ctx, partition.Lease{Key: "k", Version: 1}, clock.Now(), true)
	for range 3 {
		s.Beat(ctx)
	}
	if !l.IsConfirmed() {
		t.Fatalf("not confirmed after 3 beats that found it fresh (streak %d)", l.Streak())
	}
	// 6s left by the database, 2s margin: it ends locally after 4s, not
	// after the 8s a renewal would have given it.
	clock.Advance(3900 * time.Millisecond)
	if l.Context().Err() != nil {
		t.Fatal("the fresh lease ended before the time it had left")
	}
	clock.Advance(200 * time.Millisecond)
	select {
	case <-l.Context().Done():
	case <-time.After(testutil.WaitTimeout(5 * time.Second)):
		t.Fatal("fresh lease not ended at the deadline its remaining time gives")
	}
	if !errors.Is(context.Cause(l.Context()), heartbeat.ErrLeaseExpired) {
		t.Fatalf("cause %v, want ErrLeaseExpired", context.Cause(l.Context()))
	}
}

// A renewal that skips a lease because its row is locked is tried again
// within the beat, a quarter of a beat apart and three times at most: a
// row locked for a moment (its owner's own batch between its checkpoint's
// update and its commit) is renewed a moment later rather than a beat
// later, which a lease at tight timings may not have to spare, and a row
// locked for long costs three more renewals a beat, not more.
func TestLockedRowIsRetriedWithinTheBeat(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	beats := make(chan int, 10)
	r := &fakeRenewer{locked: map[string]time.Duration{"busy": 5 * time.Second}}
	s, err := keepalive.New(r, keepalive.Config{
		Interval: time.Second, StaleAfter: 10 * time.Second, SafetyMargin: 2 * time.Second, Clock: clock, Logger: quiet(),
		OnBeat: func(err error, _ time.Duration, renewed int) { beats <- renewed },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	l := s.Track(ctx, partition.Lease{Key: "busy", Version: 1}, clock.Now(), false)
	waiters := func(n int) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, testutil.WaitTimeout(5*time.Second))
		defer cancel()
		if err := clock.BlockUntilContext(wctx, n); err != nil {
			t.Fatalf("waiting for %d timers (ticker, lease deadline, retry): %v", n, err)
		}
	}
	renewal := func(step time.Duration, want int, what string) {
		t.Helper()
		clock.Advance(step)
		select {
		case n := <-beats:
			if n != want {
				t.Fatalf("%s renewed %d leases, want %d", what, n, want)
			}
		case <-time.After(testutil.WaitTimeout(5 * time.Second)):
			t.Fatalf("no %s", what)
		}
	}
	waiters(2) // the ticker and the lease's deadline
	renewal(time.Second, 0, "beat")
	for i := 1; i <= 3; i++ {
		waiters(3) // and the retry
		renewal(250*time.Millisecond, 0, fmt.Sprintf("retry %d", i))
	}
	waiters(2) // no fourth retry before the next beat
	renewal(250*time.Millisecond, 0, "second beat")
	r.mu.Lock()
	r.locked = nil
	r.mu.Unlock()
	waiters(3)
	renewal(250*time.Millisecond, 1, "retry after the lock went")
	if l.Context().Err() != nil {
		t.Fatalf("the lease ended: %v", context.Cause(l.Context()))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.renews != 6 {
		t.Fatalf("%d renewals, want 6 (2 beats, 4 retries)", r.renews)
	}
}
