package keepalive_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/keepalive"
	"github.com/batonhq/baton/internal/leaseinfo"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/partition"
)

// stoppedBeatEnv makes the test binary a worker process that renews one
// lease through a pooler (see stoppedBeat) instead of running the tests.
const stoppedBeatEnv = "BATON_TEST_STOPPED_BEAT"

// idleLimit is the idle_in_transaction_session_timeout of that worker:
// also how long the test has to see its transaction idle before the
// server ends it, long enough for a poll on a busy machine under the race
// detector (5 s was missed there).
const idleLimit = 15 * time.Second

// A heartbeat that finds a lease's row locked by another transaction
// waits for that lock in a transaction of its own (UPDATE, then COMMIT).
// Through a transaction pooler, where the connection string's session
// settings do not reach the server, a worker stopped (SIGSTOP, a frozen
// VM) after that UPDATE and before its COMMIT must not keep the row locked:
// the server ends the transaction within the worker's
// idle_in_transaction_session_timeout.
func TestStoppedHeartbeatThroughAPoolerReleasesTheRowLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.NewURL(t)
	via := pgtest.Bouncer(t, dsn)
	db := pgtest.Open(t, dsn, dbconn.Options{})
	store := taskstore.NewStore(db, "")
	if _, err := db.ExecContext(ctx, `INSERT INTO baton.tasks (partition_key, available) VALUES ('a', 5)`); err != nil {
		t.Fatal(err)
	}
	cands, err := store.Candidates(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	won, err := store.Claim(ctx, "w#1", time.Minute, cands)
	if err != nil || len(won) != 1 {
		t.Fatalf("claimed %d, %v", len(won), err)
	}
	lease := won[0].Lease

	// A load holds the row: the heartbeat skips it, then waits for it in
	// a transaction of its own.
	// On a connection of its own, outside any pool.
	loadConn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer loadConn.Close(ctx)
	load, err := loadConn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = load.Rollback(ctx) }()
	if _, err := load.Exec(ctx, `SELECT 1 FROM baton.tasks WHERE partition_key = 'a' FOR NO KEY UPDATE`); err != nil {
		t.Fatal(err)
	}
	var loadPID int
	var loadXID string
	if err := load.QueryRow(ctx, `SELECT pg_backend_pid(), coalesce(pg_current_xact_id_if_assigned()::text, 'none')`).Scan(&loadPID, &loadXID); err != nil {
		t.Fatal(err)
	}
	var rowXmax string
	if err := db.QueryRowContext(ctx, `SELECT xmax::text FROM baton.tasks WHERE partition_key = 'a'`).Scan(&rowXmax); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: the load (backend %d, xid %s) holds the row (xmax %s)", time.Now().Format("15:04:05.000"), loadPID, loadXID, rowXmax)
	defer func() {
		if t.Failed() {
			var locks, loadState, xmax string
			_ = db.QueryRowContext(ctx, `SELECT coalesce(string_agg(pid || ' ' || locktype || ' ' || mode || ' ' || granted, '; '), 'none')
				FROM pg_locks WHERE locktype IN ('tuple', 'transactionid', 'relation') AND relation IS DISTINCT FROM 'pg_locks'::regclass`).Scan(&locks)
			_ = db.QueryRowContext(ctx, `SELECT coalesce((SELECT state || ' xid ' || coalesce(backend_xid::text, '-') || ' since ' || coalesce(xact_start::text, '-')
				FROM pg_stat_activity WHERE pid = ?), 'gone')`, loadPID).Scan(&loadState)
			_, probe := load.Exec(ctx, `SELECT 1`)
			t.Logf("the load's transaction, probed: %v", probe)
			_ = db.QueryRowContext(ctx, `SELECT xmax::text || ' version ' || version || ' owner ' || coalesce(owner, '-') FROM baton.tasks WHERE partition_key = 'a'`).Scan(&xmax)
			t.Logf("%s: the load's backend %d: %s; the row: xmax %s; locks now: %s", time.Now().Format("15:04:05.000"), loadPID, loadState, xmax, locks)
		}
	}()

	var out bytes.Buffer
	worker := exec.Command(os.Args[0], "-test.run=^$")
	worker.Env = append(os.Environ(), stoppedBeatEnv+"=1", "BATON_TEST_URL="+via,
		"BATON_TEST_KEY="+lease.Key, "BATON_TEST_VERSION="+strconv.FormatInt(lease.Version, 10))
	worker.Stdout, worker.Stderr = &out, &out
	// A process group of its own, as a worker on another machine would
	// have: the kernel continues the stopped members of a process group
	// that becomes orphaned (SIGHUP, then SIGCONT), which the test's own
	// group may be when its runner's parent has gone; the worker's group
	// has the test binary, in another group of the session, as parent.
	worker.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if _, err := load.Exec(ctx, `SELECT 1`); err != nil {
		t.Fatalf("the load's transaction ended before the worker started: %v", err)
	}
	t.Logf("%s: starting the worker", time.Now().Format("15:04:05.000"))
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := load.Exec(ctx, `SELECT 1`); err != nil {
		t.Fatalf("the load's transaction ended as the worker started: %v", err)
	}
	// exited is closed once the worker has exited, with its error in
	// waitErr: both the checks below and the clean-up wait for it.
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = worker.Wait(); close(exited) }()
	defer func() {
		_ = worker.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("worker output:\n%s", out.String())
		}
	}()

	// The heartbeat's own UPDATE of the row, waiting for the load.
	const marker = "RETURNING available, position"
	session := func(cond string) func() error {
		return func() error {
			select {
			case <-exited:
				t.Fatalf("the worker exited early: %v\n%s", waitErr, out.String())
			default:
			}
			var n int
			var seen string
			if err := db.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE `+cond+`),
				coalesce(string_agg(state || ' ' || coalesce(wait_event_type, '-') || ' ' || left(query, 60), '; '), 'none')
				FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n, &seen); err != nil {
				return err
			}
			if n == 0 {
				// Every backend of the server, for a failure's log.
				var all string
				_ = db.QueryRowContext(ctx, `SELECT coalesce(string_agg(pid || ' ' || coalesce(datname, '-') || ' ' || backend_type || ' ' ||
					coalesce(state, '-') || ' ' || coalesce(client_port::text, '-') || ' ' || left(query, 40), '; '), 'none')
					FROM pg_stat_activity`).Scan(&all)
				return fmt.Errorf("no session with %s; sessions: %s; all backends: %s", cond, seen, all)
			}
			return nil
		}
	}
	testutil.Eventually(t, 20*time.Second, "the heartbeat waiting for the row lock",
		session("wait_event_type = 'Lock' AND strpos(query, '"+marker+"') > 0"))
	// Stop the worker, then let its UPDATE through: the server finishes
	// the statement, and the transaction then waits for a COMMIT that the
	// stopped worker cannot send.
	t.Logf("%s: stopping the worker", time.Now().Format("15:04:05.000"))
	if err := syscall.Kill(worker.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(worker.Process.Pid, syscall.SIGCONT) }()
	// Stopped for sure (the kernel stops every thread), and its UPDATE
	// still waiting for the load, before the load lets it through.
	testutil.Eventually(t, 10*time.Second, "the worker stopped", func() error {
		return stoppedState(worker.Process.Pid)
	})
	if err := session("wait_event_type = 'Lock' AND strpos(query, '" + marker + "') > 0")(); err != nil {
		t.Fatalf("the heartbeat's UPDATE is not waiting for the load any more once its worker is stopped: %v", err)
	}
	if err := load.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, idleLimit, "the stopped heartbeat's transaction idle after its UPDATE", func() error {
		if err := stoppedState(worker.Process.Pid); err != nil {
			t.Fatalf("the worker runs again: %v", err)
		}
		return session("state = 'idle in transaction' AND strpos(query, '" + marker + "') > 0")()
	})

	// The server ends that transaction, and the row is free.
	testutil.Eventually(t, idleLimit+10*time.Second, "the row lock released by the server", func() error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		_, err = tx.ExecContext(ctx, `SELECT 1 FROM baton.tasks WHERE partition_key = 'a' FOR UPDATE NOWAIT`)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
			return fmt.Errorf("still locked: %w", err)
		}
		return err
	})
}

// stoppedBeat is the worker process of
// TestStoppedHeartbeatThroughAPoolerReleasesTheRowLock: it tracks the lease
// it is given and renews it once, through the pooler, then exits.
func stoppedBeat() int {
	ctx := context.Background()
	// Who continues this process, for the test's log if it fails: the test
	// stops it (SIGSTOP) and must find it stopped.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGCONT, syscall.SIGHUP)
	go func() {
		for sig := range sigs {
			fmt.Fprintf(os.Stderr, "%s: %v received\n", time.Now().Format("15:04:05.000"), sig)
		}
	}()
	version, err := strconv.ParseInt(os.Getenv("BATON_TEST_VERSION"), 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, "reading the lease version:", err)
		return 1
	}
	db, err := dbconn.Open(os.Getenv("BATON_TEST_URL"), dbconn.Options{
		StatementTimeout: time.Minute, LockTimeout: time.Minute, IdleInTransactionTimeout: idleLimit, MaxOpenConns: 2,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer db.Close()
	// A lease long enough that the heartbeat waits for the row for
	// 30 s (a quarter of it), longer than the test takes to see it
	// waiting on a busy machine.
	const ttl = 2 * time.Minute
	svc, err := keepalive.New(storeRenewer{taskstore.NewStore(db, ""), ttl}, keepalive.Config{
		Interval: time.Second, StaleAfter: ttl, Logger: quiet(),
		// What the beat did, for the test's log if it fails.
		OnBeat: func(err error, latency time.Duration, renewed int) {
			fmt.Fprintf(os.Stderr, "beat after %s: %d renewed, error %v\n", latency, renewed, err)
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	svc.Track(ctx, partition.Lease{Key: os.Getenv("BATON_TEST_KEY"), Version: version}, time.Now(), false)
	svc.Beat(ctx)
	return 0
}

// storeRenewer renews a worker's partitions with a taskstore.Store.
type storeRenewer struct {
	s   *taskstore.Store
	ttl time.Duration
}

func (r storeRenewer) Renew(ctx context.Context, leases []partition.Lease) ([]leaseinfo.Renewal, error) {
	ren, err := r.s.HeartbeatBelow(ctx, taskstore.Worker{InstanceID: "w#1", Name: "w"}, r.ttl, r.ttl+time.Hour, leases)
	// What the renewal found, for the test's log if it fails.
	for _, r := range ren {
		fmt.Fprintf(os.Stderr, "renewal of %s: locked %v, fresh %v, remaining %s\n", r.Lease, r.Locked, r.Fresh, r.Remaining)
	}
	fmt.Fprintf(os.Stderr, "%d renewals, error %v\n", len(ren), err)
	return ren, err
}

func (r storeRenewer) Inspect(ctx context.Context, leases []partition.Lease) ([]leaseinfo.Owned, error) {
	return r.s.Inspect(ctx, "w#1", leases)
}

// stoppedState reports whether process pid is stopped (state T in
// /proc/PID/stat), with its state and process group otherwise.
func stoppedState(pid int) error {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return err
	}
	// pid (comm) state ppid pgrp ...: comm may hold spaces, so split after
	// its closing parenthesis.
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 3 {
		return fmt.Errorf("unexpected /proc/%d/stat: %q", pid, b)
	}
	if f[0] != "T" {
		return fmt.Errorf("process %d in state %s (parent %s, process group %s)", pid, f[0], f[1], f[2])
	}
	return nil
}
