package lock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
)

// The test binary doubles as a helper process: with BATON_LOCK_CHILD set it
// runs childMain instead of the tests.
func TestMain(m *testing.M) {
	if mode := os.Getenv("BATON_LOCK_CHILD"); mode != "" {
		if err := childMain(mode); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	pgtest.Main(m)
}

const counterKey = "BondBO:DK0015966592"

// increment adds one to the counter by reading it and writing the value
// read plus one, under the lock: without the lock, concurrent increments
// would overwrite each other.
func increment(ctx context.Context, db *bun.DB, method Method) error {
	return db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if err := Acquire(ctx, tx, counterKey, Options{Method: method, Timeout: time.Minute}); err != nil {
			return err
		}
		var v int64
		if err := tx.QueryRowContext(ctx, `SELECT value FROM counter`).Scan(&v); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `UPDATE counter SET value = ?`, v+1)
		return err
	})
}

func childMain(mode string) error {
	ctx := context.Background()
	db, err := dbconn.Open(os.Getenv("BATON_LOCK_DSN"), dbconn.Options{MaxOpenConns: 8})
	if err != nil {
		return err
	}
	defer db.Close()
	method := Method(os.Getenv("BATON_LOCK_METHOD"))
	switch mode {
	case "count":
		goroutines, _ := strconv.Atoi(os.Getenv("BATON_LOCK_GOROUTINES"))
		each, _ := strconv.Atoi(os.Getenv("BATON_LOCK_EACH"))
		var wg sync.WaitGroup
		errs := make(chan error, goroutines)
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range each {
					if err := increment(ctx, db.DB, method); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		return <-errs
	case "hold":
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := Acquire(ctx, tx, counterKey, Options{Method: method}); err != nil {
			return err
		}
		fmt.Println("held")
		select {} // until killed
	}
	return fmt.Errorf("unknown child mode %q", mode)
}

func child(t *testing.T, dsn, mode string, method Method, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append(env, "BATON_LOCK_CHILD="+mode, "BATON_LOCK_DSN="+dsn,
		"BATON_LOCK_METHOD="+string(method))...)
	cmd.Stderr = os.Stderr
	return cmd
}

func newCounterDB(t *testing.T) (string, *bun.DB) {
	t.Helper()
	dsn := pgtest.NewURL(t)
	db := pgtest.Open(t, dsn, dbconn.Options{})
	if _, err := db.Exec(`CREATE TABLE counter (value bigint NOT NULL); INSERT INTO counter VALUES (0)`); err != nil {
		t.Fatal(err)
	}
	return dsn, db
}

// N goroutines in each of M processes increment one counter under the same
// key: no increment is lost.
func TestNoLostUpdateAcrossProcesses(t *testing.T) {
	t.Parallel()
	for _, method := range []Method{MethodRow, MethodAdvisory} {
		t.Run(string(method), func(t *testing.T) {
			t.Parallel()
			dsn, db := newCounterDB(t)
			const procs, goroutines, each = 3, 4, 25
			var cmds []*exec.Cmd
			for range procs {
				cmd := child(t, dsn, "count", method, "BATON_LOCK_GOROUTINES="+strconv.Itoa(goroutines),
					"BATON_LOCK_EACH="+strconv.Itoa(each))
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				cmds = append(cmds, cmd)
			}
			for _, cmd := range cmds {
				if err := cmd.Wait(); err != nil {
					t.Fatalf("child: %v", err)
				}
			}
			var v int64
			if err := db.QueryRow(`SELECT value FROM counter`).Scan(&v); err != nil {
				t.Fatal(err)
			}
			if v != procs*goroutines*each {
				t.Fatalf("counter = %d, want %d: updates were lost", v, procs*goroutines*each)
			}
			var rows int
			if err := db.QueryRow(`SELECT count(*) FROM baton.entity_locks`).Scan(&rows); err != nil {
				t.Fatal(err)
			}
			if rows != 0 {
				t.Fatalf("%d lock rows left behind", rows)
			}
		})
	}
}

// A process killed while holding the lock releases it at once: its
// session ends and the server aborts its transaction.
func TestKilledHolderReleases(t *testing.T) {
	t.Parallel()
	for _, method := range []Method{MethodRow, MethodAdvisory} {
		t.Run(string(method), func(t *testing.T) {
			t.Parallel()
			dsn, db := newCounterDB(t)
			holder := child(t, dsn, "hold", method)
			out, err := holder.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := holder.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
			if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "held\n" {
				t.Fatalf("holder: %q, %v", line, err)
			}
			got := make(chan error, 1)
			go func() { got <- increment(context.Background(), db, method) }()
			marker := map[Method]string{MethodRow: ".entity_locks (lock_key)", MethodAdvisory: "pg_advisory_xact_lock"}[method]
			pgtest.WaitForLockWait(t, db, marker)
			select {
			case err := <-got:
				t.Fatalf("acquired while the holder lives: %v", err)
			default:
			}
			if err := holder.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			// The waiter's lock timeout is a minute: it gets the lock
			// because the killed holder's transaction ended.
			if err := <-got; err != nil {
				t.Fatalf("waiter after the holder was killed: %v", err)
			}
		})
	}
}

// The lock covers keys with no row, is released at rollback, and a wait is
// bounded by the lock timeout and by the context.
func TestLockSemantics(t *testing.T) {
	t.Parallel()
	for _, method := range []Method{MethodRow, MethodAdvisory} {
		t.Run(string(method), func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDB(t)
			ctx := context.Background()
			a, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Rollback()
			if err := Acquire(ctx, a, "Order:42", Options{Method: method}); err != nil {
				t.Fatal(err)
			}
			// Re-entrant within the transaction.
			if err := Acquire(ctx, a, "Order:42", Options{Method: method}); err != nil {
				t.Fatalf("second acquire in the same transaction: %v", err)
			}
			b, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			// Another key is free.
			if err := Acquire(ctx, b, "Order:43", Options{Method: method, Timeout: 50 * time.Millisecond}); err != nil {
				t.Fatalf("other key: %v", err)
			}
			if err := Acquire(ctx, b, "Order:42", Options{Method: method, Timeout: 50 * time.Millisecond}); !errors.Is(err, ErrTimeout) {
				t.Fatalf("held key with a lock timeout: %v, want ErrTimeout", err)
			}
			_ = b.Rollback()

			c, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Rollback()
			cctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- Acquire(cctx, c, "Order:42", Options{Method: method}) }()
			marker := map[Method]string{MethodRow: ".entity_locks (lock_key)", MethodAdvisory: "pg_advisory_xact_lock"}[method]
			pgtest.WaitForLockWait(t, db, marker)
			cancel()
			if err := <-done; err == nil {
				t.Fatal("acquire with a cancelled context succeeded while the key was held")
			}
			_ = c.Rollback()
			// Acquire returned at once; the server ends the abandoned wait
			// when the driver's cancel request reaches it. Until then the
			// session is still queued, and would be granted the key when a
			// rolls back and hold it until the cancel or its session's end
			// aborts its transaction.
			pgtest.WaitForNoLockWait(t, db, marker)

			if err := a.Rollback(); err != nil {
				t.Fatal(err)
			}
			d, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Rollback()
			if err := Acquire(ctx, d, "Order:42", Options{Method: method, Timeout: 50 * time.Millisecond}); err != nil {
				t.Fatalf("after the holder rolled back: %v", err)
			}
		})
	}
}
