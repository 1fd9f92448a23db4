package leader

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/uptrace/bun"
	"go.uber.org/goleak"

	"github.com/batonhq/baton/heartbeat"
	"github.com/batonhq/baton/internal/pgtest"
)

// The tests leave no goroutine behind (the server is torn down first).
func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.WithServer(m)) }

func newElector(t *testing.T, db bun.IDB, id string) *Elector {
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
	db := pgtest.NewDB(t)
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
	db := pgtest.NewDB(t)
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
