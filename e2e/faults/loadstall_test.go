package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/testutil"
)

// A load paused (SIGSTOP) inside its last step, holding the task-row locks
// of the contracts it adds to, costs no worker a lease on a contract
// outside the load, and the server ends the paused load by its idle limit.
//
// Contracts a, b and c: the worker (leader mode, so it keeps what it holds)
// holds a and b; the load adds records to a and c. A test transaction holds
// c so that the load's last step is caught holding a's lock and waiting for
// c's; the load is stopped there, then c is let go, so the load's statement
// completes and its session sits idle in its transaction with a locked. The
// worker's heartbeats skip a and keep renewing b; before, one locked row
// failed every renewal and the worker dropped b too.
func TestLoadPausedInItsLastStepCostsNoUnrelatedLease(t *testing.T) {
	r := newRun(t, scenarioSeed(t))
	ctx := context.Background()
	r.tiers = filepath.Join(r.dir, "tiers.csv")
	write(t, r.tiers, func(w io.Writer) error {
		_, err := io.WriteString(w, "contract_id,threshold_minor,discount_bp\nst-a,0,100\nst-b,0,200\nst-c,0,300\n")
		return err
	})
	first := filepath.Join(r.dir, "records-1.csv")
	write(t, first, func(w io.Writer) error {
		_, err := io.WriteString(w, "contract_id,record_id,amount_minor\nst-a,r1,100\nst-a,r2,200\nst-b,r1,300\n")
		return err
	})
	r.load(first, r.tiers)

	w := r.launch(r.dsn, "--mode", "leader")
	testutil.Eventually(t, time.Minute, "the leader holding st-a and st-b, caught up", func() error {
		if held := r.heldBy(w.name); !slices.Equal(held, []string{"st-a", "st-b"}) || r.pending() > 0 {
			return fmt.Errorf("worker holds %v, %d records pending. log:\n%s", held, r.pending(), tail(w.logs(), 20))
		}
		return nil
	})
	bVersion := r.version("st-b")

	hold, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback()
	var holder int
	if err := hold.QueryRowContext(ctx, `SELECT pg_backend_pid() FROM baton.tasks WHERE partition_key = 'st-c' FOR SHARE`).Scan(&holder); err != nil {
		t.Fatal(err)
	}
	second := filepath.Join(r.dir, "records-2.csv")
	write(t, second, func(w io.Writer) error {
		_, err := io.WriteString(w, "contract_id,record_id,amount_minor\nst-a,r3,100\nst-c,r1,100\n")
		return err
	})
	const idle = 2 * time.Second // twice the workers' lease
	load := exec.Command(workerBin, "load", "--records", second, "--lock-timeout", "0", "--idle-timeout", idle.String())
	load.Env = append(os.Environ(), "DATABASE_URL="+r.dsn)
	var loadOut bytes.Buffer
	load.Stdout, load.Stderr = &loadOut, &loadOut
	if err := load.Start(); err != nil {
		t.Fatal(err)
	}
	loadDone := make(chan error, 1)
	go func() { loadDone <- load.Wait() }()
	t.Cleanup(func() {
		_ = load.Process.Kill()
		_ = load.Process.Signal(syscall.SIGCONT)
		<-loadDone
	})
	// The load's last step has locked st-a and waits for st-c: for this
	// transaction's lock, which only the commit below ends, so the load
	// cannot finish before it is stopped. Any lock wait of that statement
	// would not do: beside busy loops, 2 runs in 100 then found the load
	// gone 27 ms after the SIGSTOP, or committed 9 ms after it and idle
	// outside a transaction, so what it had been seen waiting for was not
	// this lock (a worker's renewal briefly holding st-a would fit).
	pgtest.WaitForLockWaitOn(t, r.db.DB, "JOIN load_affected", holder)
	if err := load.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stoppedAt := time.Now()
	r.stats.fault("load_sigstop")
	if err := hold.Commit(); err != nil {
		t.Fatal(err)
	}
	// The server ends the paused load's session once it has sat idle in
	// its transaction for the idle limit.
	// pg_stat_activity offers no notification: poll it.
	var ended time.Duration
	testutil.Eventually(t, 30*time.Second, "the server ending the paused load's session", func() error {
		var sessions []string
		if err := r.db.NewRaw(`SELECT format('pid %s %s, started %s, transaction since %s, state since %s: %s',
				pid, state, backend_start, xact_start, state_change, left(query, 80))
			FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'baton-load'`).Scan(ctx, &sessions); err != nil {
			t.Fatal(err)
		}
		if len(sessions) > 0 {
			return fmt.Errorf("%d load sessions (SIGSTOP at %s):\n%s", len(sessions),
				stoppedAt.Format(time.RFC3339Nano), strings.Join(sessions, "\n"))
		}
		ended = time.Since(stoppedAt)
		return nil
	})
	t.Logf("paused load ended by the server %s after SIGSTOP (idle limit %s)", ended.Round(time.Millisecond), idle)
	if ended < idle {
		_ = load.Process.Signal(syscall.SIGCONT)
		err := <-loadDone
		loadDone <- err // for the cleanup
		t.Fatalf("the load's session ended after %s, before its idle limit %s: something else ended it; the load, continued, exited with %v:\n%s",
			ended, idle, err, loadOut.String())
	}

	// b was renewed throughout: same claim, never lost.
	if got := r.version("st-b"); got != bVersion || !slices.Contains(r.heldBy(w.name), "st-b") {
		t.Fatalf("st-b: version %d (was %d), held by %s: %v; the stalled load cost an unrelated lease. log:\n%s",
			got, bVersion, w.name, r.heldBy(w.name), tail(w.logs(), 30))
	}
	for _, line := range strings.Split(w.logs(), "\n") {
		var ev struct {
			Event      string `json:"event"`
			ContractID string `json:"contract_id"`
		}
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Event == "lost" && ev.ContractID == "st-b" {
			t.Fatalf("worker lost st-b: %s", line)
		}
	}

	// Woken, the load finds its session gone and fails; nothing was loaded.
	if err := load.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := <-loadDone; err == nil {
		t.Fatalf("the ended load exited 0:\n%s", loadOut.String())
	}
	loadDone <- nil // for the cleanup
	if out := loadOut.String(); !strings.Contains(out, "idle-in-transaction") {
		t.Errorf("the load's error does not say why it ended:\n%s", out)
	}
	if n := r.available("st-c"); n != 0 {
		t.Fatalf("st-c has %d records available after the load was ended, want 0", n)
	}
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r.waitAll(time.Minute)
	r.check()
}

// pending is the number of records not yet priced.
func (r *run) pending() int64 {
	done, total := r.progress()
	return total - done
}

func (r *run) version(contract string) int64 {
	r.t.Helper()
	var v int64
	if err := r.db.QueryRow(`SELECT version FROM baton.tasks WHERE partition_key = ?`, contract).Scan(&v); err != nil {
		r.t.Fatal(err)
	}
	return v
}

func (r *run) available(contract string) int64 {
	r.t.Helper()
	var n int64
	if err := r.db.QueryRow(`SELECT available FROM baton.tasks WHERE partition_key = ?`, contract).Scan(&n); err != nil {
		r.t.Fatal(err)
	}
	return n
}
