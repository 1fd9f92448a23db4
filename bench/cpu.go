package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// pgCPU measures the CPU time of a PostgreSQL server running on this
// machine from /proc: the postmaster's own utime+stime plus cutime+cstime
// (the CPU of every child it has reaped: backends of closed connections,
// finished autovacuum workers, ...) plus utime+stime of its live children
// (backends, checkpointer, WAL writer, ...). The difference of two samples is
// the CPU the whole server used in between, whichever processes came and
// went: a backend alive at the first sample and gone at the second is
// counted once, in full, in the postmaster's cutime.
type pgCPU struct {
	postmaster int
	tick       float64 // clock ticks per second
}

// cpuSample is a snapshot of the server's cumulative CPU time.
type cpuSample struct {
	at  time.Time
	cpu time.Duration
}

func newPGCPU(ctx context.Context, db *sql.DB) (*pgCPU, error) {
	var backend int
	if err := db.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		return nil, fmt.Errorf("reading backend pid: %w", err)
	}
	st, err := readStat(backend)
	if err != nil {
		return nil, fmt.Errorf("the server does not run on this machine (no /proc/%d): %w", backend, err)
	}
	if st.comm != "postgres" && st.comm != "postmaster" {
		return nil, fmt.Errorf("/proc/%d is %q, not a postgres backend", backend, st.comm)
	}
	c := &pgCPU{postmaster: st.ppid, tick: clockTicks()}
	if _, err := c.sample(); err != nil {
		return nil, err
	}
	return c, nil
}

func clockTicks() float64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && n > 0 {
			return float64(n)
		}
	}
	return 100
}

type procStat struct {
	comm           string
	ppid           int
	utime, stime   int64
	cutime, cstime int64
}

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	s := string(b)
	// comm is in parentheses and may contain spaces.
	open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || close < open {
		return procStat{}, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	f := strings.Fields(s[close+2:])
	// f[0] is field 3 (state); utime is field 14, so f[11].
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("short /proc/%d/stat", pid)
	}
	n := func(i int) int64 { v, _ := strconv.ParseInt(f[i], 10, 64); return v }
	return procStat{comm: s[open+1 : close], ppid: int(n(1)), utime: n(11), stime: n(12), cutime: n(13), cstime: n(14)}, nil
}

// children lists the pids whose parent is pid.
func children(pid int) []int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err == nil {
		var out []int
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
		return out
	}
	// Fallback: scan /proc.
	var out []int
	ents, _ := filepath.Glob("/proc/[0-9]*")
	for _, e := range ents {
		n, err := strconv.Atoi(filepath.Base(e))
		if err != nil {
			continue
		}
		if st, err := readStat(n); err == nil && st.ppid == pid {
			out = append(out, n)
		}
	}
	return out
}

func (c *pgCPU) sample() (cpuSample, error) {
	if c == nil {
		return cpuSample{}, nil
	}
	pm, err := readStat(c.postmaster)
	if err != nil {
		return cpuSample{}, fmt.Errorf("reading postmaster stat: %w", err)
	}
	ticks := pm.utime + pm.stime + pm.cutime + pm.cstime
	for _, ch := range children(c.postmaster) {
		if st, err := readStat(ch); err == nil {
			ticks += st.utime + st.stime
		}
	}
	return cpuSample{at: time.Now(), cpu: time.Duration(float64(ticks) / c.tick * float64(time.Second))}, nil
}

// backends lists the server's live child processes.
func (c *pgCPU) backends() []int {
	if c == nil {
		return nil
	}
	return children(c.postmaster)
}

// cpuMeter measures the database's and this process's CPU over a window.
type cpuMeter struct {
	pg        *pgCPU
	t0        time.Time
	start     cpuSample
	selfStart time.Duration
}

func startCPU(pg *pgCPU) *cpuMeter {
	m := &cpuMeter{pg: pg, t0: time.Now(), selfStart: selfCPU()}
	m.start, _ = pg.sample()
	return m
}

// cpuUse is the CPU spent over a window.
type cpuUse struct {
	Wall    float64 `json:"wall_s"`
	DB      float64 `json:"db_cpu_s"` // -1: not measurable
	Bench   float64 `json:"bench_cpu_s"`
	Workers float64 `json:"workers_cpu_s,omitempty"`
}

func (m *cpuMeter) stop() cpuUse {
	end, err := m.pg.sample()
	u := cpuUse{Wall: time.Since(m.t0).Seconds(), Bench: (selfCPU() - m.selfStart).Seconds()}
	if m.pg == nil || err != nil {
		u.DB = -1
		return u
	}
	u.DB = (end.cpu - m.start.cpu).Seconds()
	return u
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
