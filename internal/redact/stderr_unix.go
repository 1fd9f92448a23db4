//go:build unix

package redact

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// filterEnv marks the process GuardStderr starts as its filter.
const filterEnv = "BATON_REDACT_STDERR_FILTER"

// flushWait bounds how long Close waits for the filter to write out what
// it was given.
const flushWait = 5 * time.Second

// A Guard is a process's standard error made safe: everything written to
// file descriptor 2 goes through a filter process that redacts it before
// it reaches the original standard error. That covers what no writer or
// recover can: the Go runtime's report of a panic in any goroutine (or
// any other fatal error), written straight to file descriptor 2 as the
// process dies. The filter is a process of its own so that it outlives
// the crash: it writes out everything it was given, then exits.
type Guard struct {
	// Stderr is the original standard error, for output that is redacted
	// already (a Writer's), written directly and in order; it is a
	// terminal when the process's standard error was one.
	Stderr *os.File
	done   chan struct{} // closed when the filter has exited
	closed bool
}

// GuardStderr starts the filter, this program's own executable started
// again (its main must call ServeStderrFilter first), hands it the
// passwords of dsns, and puts the write end of a pipe to it on file
// descriptor 2. Call Close before exiting normally, so that everything
// written is out before the process ends. On error nothing has changed.
func GuardStderr(dsns ...string) (*Guard, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("guarding standard error: finding this program: %w", err)
	}
	origFD, err := unix.FcntlInt(2, unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return nil, fmt.Errorf("guarding standard error: duplicating it: %w", err)
	}
	orig := os.NewFile(uintptr(origFD), "/dev/stderr")
	pr, pw, err := os.Pipe()
	if err != nil {
		orig.Close()
		return nil, fmt.Errorf("guarding standard error: %w", err)
	}
	sr, sw, err := os.Pipe()
	if err != nil {
		orig.Close()
		pr.Close()
		pw.Close()
		return nil, fmt.Errorf("guarding standard error: %w", err)
	}
	// No arguments: they may hold a password, and the filter needs none.
	cmd := &exec.Cmd{Path: exe, Args: []string{os.Args[0]}, Env: append(os.Environ(), filterEnv+"=1"),
		Stdin: pr, Stdout: orig, Stderr: orig, ExtraFiles: []*os.File{sr}}
	err = cmd.Start()
	pr.Close()
	sr.Close()
	if err != nil {
		orig.Close()
		pw.Close()
		sw.Close()
		return nil, fmt.Errorf("guarding standard error: starting its filter: %w", err)
	}
	g := &Guard{Stderr: orig, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(g.done)
	}()
	// Secrets go through a pipe of their own, never the command line or
	// the environment. NUL cannot occur in a DSN taken from either.
	_, err = io.WriteString(sw, strings.Join(dsns, "\x00"))
	if cerr := sw.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Dup2(int(pw.Fd()), 2)
	}
	pw.Close() // the filter sees the end of its input once fd 2 lets go
	if err != nil {
		<-g.done
		orig.Close()
		return nil, fmt.Errorf("guarding standard error: handing over to its filter: %w", err)
	}
	return g, nil
}

// Close puts the original standard error back on file descriptor 2 and
// waits (a few seconds at most) for the filter to write out what it was
// given and exit. Output written after Close is not filtered. It is
// idempotent; Stderr stays open.
func (g *Guard) Close() error {
	if g == nil || g.closed {
		return nil
	}
	g.closed = true
	if err := unix.Dup2(int(g.Stderr.Fd()), 2); err != nil {
		return fmt.Errorf("restoring standard error: %w", err)
	}
	select {
	case <-g.done:
		return nil
	case <-time.After(flushWait):
		// A child process still holds the pipe: the filter goes on
		// until it lets go.
		return errors.New("restoring standard error: its filter is still writing")
	}
}

// ServeStderrFilter reports false at once, unless this process is the
// filter a GuardStderr started: then it redacts its input into its output
// until the input ends (the guarded process and any children it gave its
// standard error to have exited or let go) and reports true. Signals that
// stop the guarded process (SIGINT, SIGTERM, SIGHUP, SIGQUIT, from a
// terminal to its whole process group) are ignored, so that the filter is
// there for what that process writes while it stops.
func ServeStderrFilter() bool {
	if os.Getenv(filterEnv) != "1" {
		return false
	}
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	var dsns []string
	if secrets := os.NewFile(3, "secrets"); secrets != nil {
		b, _ := io.ReadAll(secrets)
		secrets.Close()
		dsns = strings.Split(string(b), "\x00")
	}
	_ = Filter(os.Stdout, os.Stdin, New(dsns...))
	return true
}
