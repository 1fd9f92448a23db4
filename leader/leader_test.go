package leader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/uptrace/bun"
	"go.uber.org/goleak"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/heartbeat"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/testutil"
)

// The tests leave no goroutine behind (the server is torn down first).
func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.WithServer(m)) }

func newElector(t *testing.T, db *dbconn.DB, id string) *Elector {
	t.Helper()
	e, err := New(db, Config{InstanceID: id, Heartbeat: 100 * time.Millisecond, StaleAfter: time.Second,
		Confirm: 2, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Stop)
	return e
}

type result struct {
	l   *Leadership
	err error
}

func campaign(e *Elector, ctx context.Context, name string) chan result {
	ch := make(chan result, 1)
	go func() { l, err := e.Campaign(ctx, name); ch <- result{l, err} }()
	return ch
}

// One leader at a time; a resignation elects the next candidate at once,
// with a higher token; a leader that stops renewing is replaced after its
// lease, and its Done closes.
func TestCampaignResignAndTakeover(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	ctx := context.Background()
	a, b, c := newElector(t, db, "a#1"), newElector(t, db, "b#1"), newElector(t, db, "c#1")

	la, err := a.Campaign(ctx, "billing")
	if err != nil {
		t.Fatal(err)
	}
	chB := campaign(b, ctx, "billing")
	// b is waiting: a's leadership is live and checked in a transaction.
	select {
	case r := <-chB:
		t.Fatalf("b elected while a leads: %+v", r)
	case <-a.cfg.Clock.After(500 * time.Millisecond): // b has had five attempts
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := la.Check(ctx, tx); err != nil {
		t.Fatalf("leader's check: %v", err)
	}
	_ = tx.Rollback()

	if err := la.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	<-la.Done()
	rb := <-chB
	if rb.err != nil || rb.l.Token <= la.Token {
		t.Fatalf("b after a resigned: %+v (a's token %d)", rb, la.Token)
	}
	lb := rb.l

	// b dies: its renewals stop. c is elected after the lease, b's Done
	// closes with its lease expired locally, and b's check fails.
	chC := campaign(c, ctx, "billing")
	b.Stop()
	<-lb.Done()
	if cause := context.Cause(lb.Context()); !errors.Is(cause, heartbeat.ErrLeaseExpired) {
		t.Fatalf("b's leadership ended with %v, want a local lease expiry", cause)
	}
	rc := <-chC
	if rc.err != nil || rc.l.Token <= lb.Token {
		t.Fatalf("c after b died: %+v (b's token %d)", rc, lb.Token)
	}
	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := lb.Check(ctx, tx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("dead leader's check: %v, want ErrNotLeader", err)
	}
	select {
	case <-rc.l.Done():
		t.Fatal("c's leadership ended")
	default:
	}
}

// Campaign returns when its context ends.
func TestCampaignCancelled(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	a, b := newElector(t, db, "a#1"), newElector(t, db, "b#1")
	if _, err := a.Campaign(context.Background(), "x"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch := campaign(b, ctx, "x")
	cancel()
	if r := <-ch; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled campaign: %+v", r)
	}
}

// recorder is a log handler that sends the event of every record it sees.
type recorder struct{ events chan string }

func (r recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r recorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r recorder) WithGroup(string) slog.Handler            { return r }
func (r recorder) Handle(_ context.Context, rec slog.Record) error {
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == "event" {
			select {
			case r.events <- a.Value.String():
			default: // nobody is counting any more
			}
		}
		return true
	})
	return nil
}

// backdate ends name's lease on the database now, as if its leader's
// renewals had stopped a lease ago.
func backdate(t *testing.T, db bun.IDB, name string) {
	t.Helper()
	if _, err := db.ExecContext(context.Background(), `
		UPDATE baton.leaderships SET lease_expires_at = now() - interval '1 second' WHERE name = ?`, name); err != nil {
		t.Fatalf("back-dating leadership %s: %v", name, err)
	}
}

// A leader's write fenced with Check and a later leader's cannot both
// commit: a candidate is not elected while a transaction that passed the
// last leader's Check is open, even once that leader's lease has run out.
func TestFencedWritesOfTwoLeadersDoNotOverlap(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE fenced_writes (leader text NOT NULL, token bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	a := newElector(t, db, "a#1")
	b, err := New(db, Config{InstanceID: "b#1", Heartbeat: 100 * time.Millisecond, StaleAfter: time.Second,
		Confirm: 2, Logger: slog.New(recorder{events: make(chan string, 100)})})
	if err != nil {
		t.Fatal(err)
	}
	events := b.cfg.Logger.Handler().(recorder).events
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)

	la, err := a.Campaign(ctx, "billing")
	if err != nil {
		t.Fatal(err)
	}
	txA, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer txA.Rollback()
	if err := la.Check(ctx, txA); err != nil {
		t.Fatalf("leader's check: %v", err)
	}
	if _, err := txA.ExecContext(ctx, `INSERT INTO fenced_writes VALUES ('a', ?)`, la.Token); err != nil {
		t.Fatal(err)
	}
	// a's renewals stop (Stop returns once the last one has ended) and its
	// lease runs out on the database while its transaction is open.
	a.Stop()
	backdate(t, db, "billing")

	chB := campaign(b, ctx, "billing")
	for locked := 0; locked < 2; { // two attempts that find the row locked
		select {
		case r := <-chB:
			if r.err != nil {
				t.Fatal(r.err)
			}
			// b was elected while a's fenced transaction is open: show
			// whether both leaders' writes commit.
			txB, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer txB.Rollback()
			if err := r.l.Check(ctx, txB); err != nil {
				t.Fatalf("b's check: %v", err)
			}
			if _, err := txB.ExecContext(ctx, `INSERT INTO fenced_writes VALUES ('b', ?)`, r.l.Token); err != nil {
				t.Fatal(err)
			}
			errB, errA := txB.Commit(), txA.Commit()
			if errA == nil && errB == nil {
				t.Fatalf("both leaders' fenced writes committed: a (token %d) and b (token %d), "+
					"b elected while a's checked transaction was open", la.Token, r.l.Token)
			}
			t.Fatalf("b elected (token %d) while a's checked transaction was open (commits: a %v, b %v)",
				r.l.Token, errA, errB)
		case ev := <-events:
			if ev == "row_locked" {
				locked++
			}
		case <-time.After(testutil.WaitTimeout(10 * time.Second)):
			t.Fatal("b's campaign neither was elected nor found the row locked")
		}
	}
	if err := txA.Commit(); err != nil {
		t.Fatalf("a's fenced write, checked while a led: %v", err)
	}
	r := testutil.Receive(t, chB, 10*time.Second, "b elected once a's transaction ended")
	if r.err != nil || r.l.Token <= la.Token {
		t.Fatalf("b after a's transaction ended: %+v (a's token %d)", r, la.Token)
	}
	txB, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer txB.Rollback()
	if err := r.l.Check(ctx, txB); err != nil {
		t.Fatalf("b's check: %v", err)
	}
	if _, err := txB.ExecContext(ctx, `INSERT INTO fenced_writes VALUES ('b', ?)`, r.l.Token); err != nil {
		t.Fatal(err)
	}
	if err := txB.Commit(); err != nil {
		t.Fatal(err)
	}
	// a's leadership is over: a check in a new transaction fails.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := la.Check(ctx, tx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("a's check after b's election: %v, want ErrNotLeader", err)
	}
}

// Check compares the lease with the time of the check, not with the start
// of its transaction: a transaction begun while the lease was live does not
// pass Check once it has run out.
func TestCheckAfterLeaseRanOutInOpenTransaction(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	ctx := context.Background()
	a := newElector(t, db, "a#1")
	la, err := a.Campaign(ctx, "billing")
	if err != nil {
		t.Fatal(err)
	}
	a.Stop() // no renewal extends the lease again

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var began time.Time
	if err := tx.QueryRowContext(ctx, `SELECT now()`).Scan(&began); err != nil {
		t.Fatal(err)
	}
	// The lease runs out after the transaction began, before the check.
	var expired time.Time
	if err := db.QueryRowContext(ctx, `
		UPDATE baton.leaderships SET lease_expires_at = clock_timestamp() WHERE name = 'billing'
		RETURNING lease_expires_at`).Scan(&expired); err != nil {
		t.Fatal(err)
	}
	if !expired.After(began) {
		t.Fatalf("lease ended at %s, not after the transaction began (%s)", expired, began)
	}
	if err := la.Check(ctx, tx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("check after the lease ran out, in a transaction begun before: %v, want ErrNotLeader", err)
	}
}

// Resign waits for the leadership's checked transactions to end, while the
// leader's renewals go on; then the next candidate is elected at once.
func TestResignWaitsForCheckedTransaction(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	ctx := context.Background()
	a, b := newElector(t, db, "a#1"), newElector(t, db, "b#1")
	la, err := a.Campaign(ctx, "billing")
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := la.Check(ctx, tx); err != nil {
		t.Fatalf("leader's check: %v", err)
	}
	resigned := make(chan error, 1)
	go func() { resigned <- la.Resign(ctx) }()
	pgtest.WaitForLockWait(t, db.DB, "owner = NULL")
	select {
	case err := <-resigned:
		t.Fatalf("resigned (%v) while a checked transaction is open", err)
	default:
	}
	// Renewals are held up neither by the checked transaction nor by the
	// resignation waiting for it.
	var before time.Time
	if err := db.QueryRowContext(ctx, `SELECT heartbeat_at FROM baton.leaderships WHERE name = 'billing'`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "a renewal while the resignation waits", func() error {
		var at time.Time
		if err := db.QueryRowContext(ctx, `SELECT heartbeat_at FROM baton.leaderships WHERE name = 'billing'`).Scan(&at); err != nil {
			t.Fatal(err)
		}
		if !at.After(before) {
			return fmt.Errorf("heartbeat_at still %s", at)
		}
		return nil
	})
	if err := tx.Commit(); err != nil {
		t.Fatalf("committing the checked transaction: %v", err)
	}
	if err := testutil.Receive(t, resigned, 10*time.Second, "resignation once the transaction ended"); err != nil {
		t.Fatal(err)
	}
	<-la.Done()
	tx2, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx2.Rollback()
	if err := la.Check(ctx, tx2); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("check after resigning: %v, want ErrNotLeader", err)
	}
	lb, err := b.Campaign(ctx, "billing")
	if err != nil || lb.Token <= la.Token {
		t.Fatalf("b after a resigned: %+v, %v (a's token %d)", lb, err, la.Token)
	}
}

// Candidates racing for a new name or for a lease that ran out: exactly one
// wins each round, with the next token.
func TestConcurrentCandidatesOneWinner(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	ctx := context.Background()
	const candidates = 6
	var electors []*Elector
	for i := range candidates {
		e, err := New(db, Config{InstanceID: fmt.Sprintf("c#%d", i), Heartbeat: 100 * time.Millisecond,
			StaleAfter: time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		electors = append(electors, e)
	}
	for round := int64(1); round <= 5; round++ {
		if round > 1 {
			backdate(t, db, "race")
		}
		won := make(chan int64, candidates)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for _, e := range electors {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				v, _, _, err := e.try(ctx, "race")
				if err != nil {
					t.Errorf("%s: %v", e.InstanceID(), err)
				}
				won <- v
			}()
		}
		close(start)
		wg.Wait()
		close(won)
		var winners []int64
		for v := range won {
			if v > 0 {
				winners = append(winners, v)
			}
		}
		if len(winners) != 1 || winners[0] != round {
			t.Fatalf("round %d: winners' tokens %v, want exactly one with token %d", round, winners, round)
		}
	}
}
