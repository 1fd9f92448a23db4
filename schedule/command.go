package schedule

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// KillAfterDefault is how long a command has to exit after SIGTERM before
// it is sent SIGKILL.
const KillAfterDefault = 10 * time.Second

// Command returns a RunFunc that runs argv as an external command with the
// run in its environment: BATON_JOB, BATON_SLOT (RFC 3339, UTC, database
// clock), BATON_FENCE, BATON_IDEMPOTENCY_KEY and BATON_WORKER. Each line of
// its output is logged with the job's name (event job_output, stream
// stdout or stderr); a non-zero exit status fails the run. Standard output
// is logged at info as it comes; standard error is held until the command
// exits and then logged with the run's result (result ok or failed): at
// warn when the run failed, at info when it succeeded. (A command that
// writes more than heldStderrLines lines to it has the earlier ones logged
// at info as they are pushed out.) When the run's context ends (lease lost, lock-at-most-for
// reached, worker stopping) the command's process group gets SIGTERM, and
// SIGKILL killAfter later (KillAfterDefault when zero). If the worker
// process dies, the command's own process is killed by a parent-death
// signal; processes it started itself are not, unless they exit with it.
func Command(argv []string, killAfter time.Duration, logger *slog.Logger) RunFunc {
	if killAfter <= 0 {
		killAfter = KillAfterDefault
	}
	return func(ctx context.Context, r *Run) error {
		if len(argv) == 0 {
			return fmt.Errorf("job %s: empty command", r.Job)
		}
		// The parent-death signal is tied to the thread that forks: keep
		// this goroutine on one thread until the command has exited.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()

		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(),
			"BATON_JOB="+r.Job,
			"BATON_SLOT="+r.Slot.UTC().Format(time.RFC3339Nano),
			fmt.Sprintf("BATON_FENCE=%d", r.Fence),
			"BATON_IDEMPOTENCY_KEY="+r.IdempotencyKey,
			"BATON_WORKER="+r.Worker,
		)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return fmt.Errorf("job %s: %w", r.Job, err)
		}
		stderr, err := cmd.StderrPipe()
		if err != nil {
			return fmt.Errorf("job %s: %w", r.Job, err)
		}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("job %s: starting %s: %w", r.Job, argv[0], err)
		}
		log := logger.With("job", r.Job, "slot", r.Slot.UTC().Format(time.RFC3339Nano), "pid", cmd.Process.Pid)
		var wg sync.WaitGroup
		wg.Add(2)
		var held heldLines
		go func() { defer wg.Done(); logLines(stdout, log, "stdout") }()
		go func() { defer wg.Done(); held.read(stderr, log) }()

		exited := make(chan struct{})
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			select {
			case <-exited:
				return
			case <-ctx.Done():
			}
			log.Warn("stopping job command", "event", "job_signal", "signal", "SIGTERM",
				"cause", context.Cause(ctx).Error())
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
			t := time.NewTimer(killAfter)
			defer t.Stop()
			select {
			case <-exited:
			case <-t.C:
				log.Warn("job command ignored SIGTERM, killing it", "event", "job_signal", "signal", "SIGKILL")
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			}
		}()
		wg.Wait() // output pipes close when the command (and its children) exit
		err = cmd.Wait()
		close(exited)
		<-stopped
		held.flush(log, err != nil)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("job %s stopped (%v): %w", r.Job, context.Cause(ctx), err)
			}
			return fmt.Errorf("job %s: %s: %w", r.Job, argv[0], err)
		}
		return nil
	}
}

// heldStderrLines is how many lines of a command's standard error are held
// until it exits.
const heldStderrLines = 1000

// heldLines holds the last heldStderrLines lines of a command's standard
// error until its result is known.
type heldLines struct {
	lines []string
}

// read holds the lines of rd; a line pushed out by a newer one is logged
// at info, the run's result still unknown.
func (h *heldLines) read(rd io.Reader, log *slog.Logger) {
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		if len(h.lines) == heldStderrLines {
			log.Info(h.lines[0], "event", "job_output", "stream", "stderr")
			h.lines = h.lines[1:]
		}
		h.lines = append(h.lines, sc.Text())
	}
}

// flush logs the held lines with the run's result: at warn for a failed
// run, whose standard error likely says why, at info for one that
// succeeded.
func (h *heldLines) flush(log *slog.Logger, failed bool) {
	level, result := slog.LevelInfo, "ok"
	if failed {
		level, result = slog.LevelWarn, "failed"
	}
	for _, l := range h.lines {
		log.Log(context.Background(), level, l, "event", "job_output", "stream", "stderr", "result", result)
	}
	h.lines = nil
}

func logLines(rd io.Reader, log *slog.Logger, stream string) {
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		log.Info(sc.Text(), "event", "job_output", "stream", stream)
	}
}
