package distributor_test

import (
	"context"
	"io"
	"net"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/testutil"
)

// blockRegistration holds the workers table locked so that a starting
// worker's registration waits, and returns when it does; the caller ends
// the returned transaction.
func blockRegistration(t *testing.T, e *env) (release func()) {
	t.Helper()
	tx, err := e.db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`LOCK TABLE baton.workers IN SHARE ROW EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	return func() { _ = tx.Rollback() }
}

// A database that drops the connection of a worker registering at start
// (a restart, a failover) does not fail the worker: it registers again
// and runs.
func TestRegistrationSurvivesALostConnection(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addWork(5, "p")
	release := blockRegistration(t, e)
	ev := newEvents()
	cfg := fastConfig("w", ev)
	cfg.StaleAfter = 30 * time.Second // the start's bound: far beyond this test
	db := pgtest.OpenDB(t, e.dsn, dbconn.Options{MaxOpenConns: 8})
	d, err := distributor.New(db, newProc(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx) }()
	pgtest.WaitForLockWait(t, e.db.DB, "workers (instance_id")
	if _, err := e.db.Exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock' AND strpos(query, 'workers (instance_id') > 0`); err != nil {
		t.Fatal(err)
	}
	release()
	ev.wait(t, 20*time.Second, "the partition processed", kind(distributor.EventReleased))
	cancel()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("Run = %v; want a worker that registered again and ran", err)
		}
	case <-time.After(testutil.WaitTimeout(20 * time.Second)):
		t.Fatal("Run did not return after its context ended")
	}
	e.verify()
}

// A worker stopped while it registers stops gracefully: Run returns nil,
// as for any stop.
func TestStopWhileRegisteringIsGraceful(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	release := blockRegistration(t, e)
	defer release()
	cfg := fastConfig("w", newEvents())
	cfg.StaleAfter = 30 * time.Second
	db := pgtest.OpenDB(t, e.dsn, dbconn.Options{MaxOpenConns: 8})
	d, err := distributor.New(db, newProc(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx) }()
	pgtest.WaitForLockWait(t, e.db.DB, "workers (instance_id")
	cancel()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("Run = %v; want nil (a graceful stop)", err)
		}
	case <-time.After(testutil.WaitTimeout(20 * time.Second)):
		t.Fatal("Run did not return after its context ended")
	}
}

// resettingFront listens on a local port and relays connections to the
// server at target, except that it closes the first n at once, as a
// network reset or a restarting server would. It returns dsn with its
// address instead of the server's.
func resettingFront(t *testing.T, dsn string, n int) string {
	return front(t, dsn, func(i int64) bool { return i <= int64(n) })
}

// front is resettingFront closing the i-th connection (from 1) at once
// when reset(i) says so.
func front(t *testing.T, dsn string, reset func(i int64) bool) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var refused atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if reset(refused.Add(1)) {
				_ = c.Close()
				continue
			}
			go func() {
				defer c.Close()
				s, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer s.Close()
				go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
				_, _ = io.Copy(c, s)
			}()
		}
	}()
	u.Host = ln.Addr().String()
	return u.String()
}

// A worker whose first connections are reset (a restart or a network
// fault as it starts) connects again within Start's bound instead of
// failing: the fault suite saw a worker exit so.
func TestStartSurvivesResetConnections(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addWork(5, "p")
	ev := newEvents()
	cfg := fastConfig("w", ev)
	cfg.StaleAfter = 30 * time.Second // the start's bound: far beyond this test
	db := pgtest.OpenDB(t, resettingFront(t, e.dsn, 6), dbconn.Options{MaxOpenConns: 8})
	d, err := distributor.New(db, newProc(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		t.Fatalf("Start = %v; want a worker that connected again", err)
	}
	defer d.Stop()
	ev.wait(t, 20*time.Second, "the partition processed", kind(distributor.EventReleased))
	e.verify()
}

// A worker that cannot reach the database for longer than the default
// bound of its start (StaleAfter, at least 10s) still starts when its
// StartTimeout is longer: the fault suite saw a worker exit 1 when a
// network fault cut it off while it registered.
func TestStartWaitsOutAnOutageWithinStartTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addWork(5, "p")
	ev := newEvents()
	cfg := fastConfig("w", ev)
	cfg.StartTimeout = 2 * time.Minute
	outage := 12 * time.Second // longer than the default bound
	var until atomic.Int64
	until.Store(time.Now().Add(outage).UnixNano())
	var resets atomic.Int64
	dsn := front(t, e.dsn, func(int64) bool {
		if time.Now().UnixNano() < until.Load() {
			resets.Add(1)
			return true
		}
		return false
	})
	db := pgtest.OpenDB(t, dsn, dbconn.Options{MaxOpenConns: 8})
	d, err := distributor.New(db, newProc(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := d.Start(context.Background()); err != nil {
		t.Fatalf("Start = %v; want a worker that waited out the outage", err)
	}
	defer d.Stop()
	if waited := time.Since(start); waited < outage || resets.Load() < 2 {
		t.Fatalf("Start returned after %s with %d connections reset; want it to have retried through the %s outage", waited, resets.Load(), outage)
	}
	ev.wait(t, 20*time.Second, "the partition processed", kind(distributor.EventReleased))
	e.verify()
}

// Without a longer StartTimeout the same outage fails the start, naming
// the worker: the bound is what the test above lengthens.
func TestStartFailsWhenTheOutageOutlastsStartTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := fastConfig("w", newEvents())
	cfg.StartTimeout = time.Second // raised to the 10s floor
	dsn := front(t, e.dsn, func(int64) bool { return true })
	db := pgtest.OpenDB(t, dsn, dbconn.Options{MaxOpenConns: 8})
	d, err := distributor.New(db, newProc(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = d.Start(context.Background())
	if err == nil {
		d.Stop()
		t.Fatal("Start succeeded while every connection was reset")
	}
	if msg := err.Error(); !strings.Contains(msg, "registering worker w#") && !strings.Contains(msg, "connecting worker w#") {
		t.Fatalf("Start error = %v; want it to name the worker it could not register", err)
	}
	if waited := time.Since(start); waited < 10*time.Second {
		t.Fatalf("Start failed after %s; want it to retry for its 10s floor", waited)
	}
}
