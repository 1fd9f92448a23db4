package main

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Scenario 5: go test benchmarks: the protocol statements (bench), the
// pricing engine (pricing) and the CSV loader (ingest), against this run's
// server through TEST_DATABASE_URL.

type benchLine struct {
	Package string             `json:"package"`
	Name    string             `json:"name"`
	N       int64              `json:"n"`
	Metrics map[string]float64 `json:"metrics"` // unit → value (ns/op, B/op, …)
}

type microResult struct {
	Command string      `json:"command"`
	Lines   []benchLine `json:"lines"`
	Output  string      `json:"output"`
	Seconds float64     `json:"seconds"`
}

func (e *env) runMicro(ctx context.Context, res *results) error {
	m := &microResult{}
	res.Micro = m
	rows := "200000"
	pricingTime := "1s"
	if e.cfg.quick {
		rows, pricingTime = "20000", "200ms"
	}
	// The loader benchmark loads the whole file per iteration: one is
	// enough.
	// The bench's own benchmarks are in its module, the others in the
	// library's (the working directory).
	runs := []struct {
		dir, pkg, benchtime string
		env                 []string
	}{
		{"bench", ".", e.cfg.benchtime, nil},
		{"", "./pricing", pricingTime, nil},
		{"", "./pricing/ingest", "1x", []string{"BATON_BENCH_ROWS=" + rows}},
	}
	start := time.Now()
	for _, r := range runs {
		args := []string{"test", "-run", "^$", "-bench", ".", "-benchmem", "-benchtime", r.benchtime, "-count", "1", r.pkg}
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = r.dir
		cmd.Env = append(append(os.Environ(), "TEST_DATABASE_URL="+e.url("postgres")), r.env...)
		line := strings.TrimSpace("TEST_DATABASE_URL=<this run's server> " + strings.Join(r.env, " ") + " go " + strings.Join(args, " "))
		if r.dir != "" {
			line = "(cd " + r.dir + " && " + line + ")"
		}
		res.addCommand(line)
		m.Command += line + "\n"
		log.Printf("micro: %s", line)
		out, err := cmd.CombinedOutput()
		m.Output += string(out)
		if err != nil {
			m.Seconds = time.Since(start).Seconds()
			m.Lines = parseBench(m.Output)
			return fmt.Errorf("go test -bench %s: %w\n%s", r.pkg, err, lastLines(string(out), 20))
		}
	}
	m.Seconds = time.Since(start).Seconds()
	m.Lines = parseBench(m.Output)
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// parseBench reads the standard benchmark output format.
func parseBench(out string) []benchLine {
	var lines []benchLine
	pkg := ""
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		l := sc.Text()
		if p, ok := strings.CutPrefix(l, "pkg: "); ok {
			pkg = p
			continue
		}
		if !strings.HasPrefix(l, "Benchmark") {
			continue
		}
		f := strings.Fields(l)
		if len(f) < 4 {
			continue
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		b := benchLine{Package: pkg, Name: f[0], N: n, Metrics: map[string]float64{}}
		for i := 2; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				b.Metrics[f[i+1]] = v
			}
		}
		lines = append(lines, b)
	}
	return lines
}
