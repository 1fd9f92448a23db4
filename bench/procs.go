package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// buildWorker builds the worker binary once.
func (e *env) buildWorker(ctx context.Context) error {
	e.workerBin = filepath.Join(e.tmp, "worker")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", e.workerBin, "./cmd/worker")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	log.Printf("building the worker: %s", strings.Join(cmd.Args, " "))
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building the worker binary: %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the bench binary for peer workers: %w", err)
	}
	e.selfBin = self
	return nil
}

// proc is one worker process.
type proc struct {
	id      string // worker name (--id)
	cmd     *exec.Cmd
	logPath string
	started time.Time
	done    chan struct{}
	err     error
	exited  time.Time
}

// commandLine renders a worker command for the report, with the database
// as $DATABASE_URL.
func commandLine(bin string, args []string) string {
	return "DATABASE_URL=... " + bin + " " + strings.Join(args, " ")
}

// startBaton starts `worker run` with args (after "run").
func (e *env) startBaton(dbURL, logDir, id string, args ...string) (*proc, error) {
	full := append([]string{"run", "--id", id, "--log-format", "json"}, args...)
	return e.start(e.workerBin, full, dbURL, logDir, id)
}

// startPeer starts a peer worker: this binary re-executed as peer-worker.
func (e *env) startPeer(dbURL, logDir, id, design string, args ...string) (*proc, error) {
	full := append([]string{"peer-worker", "--design", design, "--id", id}, args...)
	return e.start(e.selfBin, full, dbURL, logDir, id)
}

func (e *env) start(bin string, args []string, dbURL, logDir, id string) (*proc, error) {
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	p := &proc{id: id, logPath: filepath.Join(logDir, id+".log"), done: make(chan struct{})}
	f, err := os.Create(p.logPath)
	if err != nil {
		return nil, fmt.Errorf("creating worker log: %w", err)
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	// Own process group: a signal to the bench (Ctrl-C) does not reach
	// the workers, which the bench stops itself.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting worker %s: %w", id, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		p.exited = time.Now()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) signal(sig syscall.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("sending %s to worker %s: %w", sig, p.id, err)
	}
	return nil
}

func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// cpu is the process's user+system CPU time, once it has exited.
func (p *proc) cpu() time.Duration {
	if p.running() || p.cmd.ProcessState == nil {
		return 0
	}
	return p.cmd.ProcessState.UserTime() + p.cmd.ProcessState.SystemTime()
}

// waitAll waits for every process to exit, up to timeout; stragglers are
// killed and reported.
func waitAll(ps []*proc, timeout time.Duration) error {
	deadline := time.After(timeout)
	var errs []string
	for _, p := range ps {
		select {
		case <-p.done:
		case <-deadline:
			for _, q := range ps {
				if q.running() {
					_ = q.cmd.Process.Signal(syscall.SIGCONT)
					_ = q.cmd.Process.Kill()
					<-q.done
					errs = append(errs, fmt.Sprintf("%s did not finish within %s (log %s)", q.id, timeout, q.logPath))
				}
			}
			return fmt.Errorf("%s", strings.Join(errs, "; "))
		}
	}
	return nil
}

// killAll ends every process still running.
func killAll(ps []*proc) {
	for _, p := range ps {
		if p.running() {
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
}

// failed returns an error naming processes that exited non-zero, except
// those in expected.
func failed(ps []*proc, expected map[string]bool) error {
	var errs []string
	for _, p := range ps {
		if expected[p.id] || p.running() {
			continue
		}
		if p.err != nil {
			errs = append(errs, fmt.Sprintf("worker %s: %v; last log lines:\n%s", p.id, p.err, tail(p.logPath, 8)))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return nil
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// events counts the protocol events in a JSON worker log.
type events struct {
	Claimed   int `json:"claimed"`
	Takeovers int `json:"takeovers"`
	Released  int `json:"released"`
	Lost      int `json:"lost"`
	Fenced    int `json:"fenced"`
	Failed    int `json:"failed"`
}

func countEvents(path string) events {
	var ev events
	f, err := os.Open(path)
	if err != nil {
		return ev
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Event    string `json:"event"`
			Takeover bool   `json:"takeover"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		switch line.Event {
		case "claimed":
			ev.Claimed++
			if line.Takeover {
				ev.Takeovers++
			}
		case "released":
			ev.Released++
		case "lost":
			ev.Lost++
		case "fenced":
			ev.Fenced++
		case "failed":
			ev.Failed++
		}
	}
	return ev
}

func sumEvents(ps []*proc) events {
	var ev events
	for _, p := range ps {
		addCounts(&ev, countEvents(p.logPath))
	}
	return ev
}

// workersCPU sums the CPU time of exited processes.
func workersCPU(ps []*proc) float64 {
	var d time.Duration
	for _, p := range ps {
		d += p.cpu()
	}
	return d.Seconds()
}
