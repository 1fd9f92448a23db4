package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/testutil"
)

// openPTY returns the two ends of a new pseudo-terminal.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		t.Fatalf("unlocking the pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		m.Close()
		t.Fatalf("naming the pseudo-terminal: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Fatalf("opening the pseudo-terminal: %v", err)
	}
	return m, s
}

// screen collects what a process writes to a terminal and says when a
// text has appeared.
type screen struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	change chan struct{} // closed and replaced at every read
	closed chan struct{} // the terminal's other end is gone
}

func readScreen(master *os.File) *screen {
	s := &screen{change: make(chan struct{}), closed: make(chan struct{})}
	go func() {
		defer close(s.closed)
		b := make([]byte, 4096)
		for {
			n, err := master.Read(b)
			s.mu.Lock()
			s.buf.Write(b[:n])
			close(s.change)
			s.change = make(chan struct{})
			s.mu.Unlock()
			if err != nil {
				return // EIO once every process has closed the terminal
			}
		}
	}()
	return s
}

// waitFor waits until the output contains text.
func (s *screen) waitFor(t *testing.T, text string) {
	t.Helper()
	timeout := time.After(testutil.WaitTimeout(2 * time.Minute))
	for {
		s.mu.Lock()
		out, change := s.buf.String(), s.change
		s.mu.Unlock()
		if strings.Contains(out, text) {
			return
		}
		select {
		case <-change:
		case <-s.closed:
			t.Fatalf("the terminal closed before %q appeared:\n%q", text, out)
		case <-timeout:
			t.Fatalf("%q did not appear:\n%q", text, out)
		}
	}
}

func (s *screen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// visibleLines is what a terminal shows of out, line by line: a carriage
// return with an erase (the progress line's redraw) replaces the line.
func visibleLines(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimRight(l, "\r")
		if i := strings.LastIndex(l, "\r\033[K"); i >= 0 {
			l = l[i+len("\r\033[K"):]
		}
		lines = append(lines, l)
	}
	return lines
}

// Ctrl-C during a load of a large file, on a terminal: the progress line
// is ended, not glued to what follows; the message says nothing was
// loaded, and nothing was (the records already copied are rolled back);
// the exit code is 130; the interrupted load took no load id.
func TestLoadInterruptedBySIGINTLoadsNothing(t *testing.T) {
	t.Parallel()
	c := cli{t, pgtest.NewURL(t)}
	dir := t.TempDir()
	c.mustRun("seed", "--contracts", "20", "--records-per-contract", "15000", "--dir", dir)
	c.mustRun("load", "--tiers", filepath.Join(dir, "tiers.csv"))
	db := pgtest.Open(t, c.dsn, dbconn.Options{})

	// A task row locked by another transaction holds the load at its last
	// stage, after its records are copied, until it is interrupted: the
	// signal cannot come too late, and no sleep decides when to send it.
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	var locked string
	if err := tx.QueryRowContext(ctx, `SELECT partition_key FROM baton.tasks ORDER BY partition_key LIMIT 1 FOR UPDATE`).Scan(&locked); err != nil {
		t.Fatalf("locking a task row: %v", err)
	}

	master, tty := openPTY(t)
	defer master.Close()
	cmd := c.command("load", "--records", filepath.Join(dir, "records.csv"), "--lock-timeout", "0")
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, tty
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close() // the load (and its stderr filter) hold it now
	scr := readScreen(master)
	scr.waitFor(t, "loading: reading records: 100000 rows")
	scr.waitFor(t, "loading: updating contracts")
	pgtest.WaitForLockWait(t, db, "FOR NO KEY UPDATE") // the load's lock of the task rows waits for ours
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	<-scr.closed
	out := scr.String()
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Fatalf("exit %v after SIGINT, want 130\n%q", err, out)
	}
	lines := visibleLines(out)
	const want = "worker: interrupted: nothing was loaded (the load was rolled back)"
	found := false
	for _, l := range lines {
		if strings.Contains(l, "loading:") && (strings.Contains(l, "level=") || strings.Contains(l, "worker:")) {
			t.Errorf("a message is glued to the progress line: %q", l)
		}
		found = found || l == want
	}
	if !found {
		t.Errorf("no line %q on the terminal:\n%s", want, strings.Join(lines, "\n"))
	}
	if stdout.Len() > 0 {
		t.Errorf("an interrupted load printed a summary: %s", stdout.String())
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	var chunks, available, loads int64
	if err := db.QueryRow(`SELECT (SELECT count(*) FROM baton.record_chunks), (SELECT coalesce(sum(available), 0) FROM baton.tasks),
			(SELECT count(*) FROM baton.loads)`).Scan(&chunks, &available, &loads); err != nil {
		t.Fatal(err)
	}
	if chunks != 0 || available != 0 || loads != 1 {
		t.Fatalf("after the interrupted load: %d record chunks, %d records available, %d loads; want 0, 0 and the tiers' 1", chunks, available, loads)
	}
	if out := c.mustRun("load", "--records", filepath.Join(dir, "records.csv")); !strings.HasPrefix(out, "load 2: 0 tier rows, 0 contracts created, 300000 records accepted") {
		t.Fatalf("the same load again:\n%s", out)
	}
}
