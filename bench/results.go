package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// results is everything one report run measured; results.json is this,
// and report.md is rendered from it.
type results struct {
	Machine     machine            `json:"machine"`
	Server      serverInfo         `json:"server"`
	Config      configInfo         `json:"config"`
	Commands    []string           `json:"commands"`
	Throughput  *throughputResult  `json:"throughput,omitempty"`
	Events      *eventsResult      `json:"events,omitempty"`
	Peers       *peersResult       `json:"peers,omitempty"`
	Coord       *coordResult       `json:"coordination,omitempty"`
	Failover    *failoverResult    `json:"failover,omitempty"`
	Micro       *microResult       `json:"micro,omitempty"`
	Horizon     *horizonResult     `json:"horizon,omitempty"`
	Scale       *scaleResult       `json:"scale,omitempty"`
	Shapes      *shapesResult      `json:"shapes,omitempty"`
	Rerate      *rerateResult      `json:"rerate,omitempty"`
	Latency     *latencyResult     `json:"latency,omitempty"`
	SegTakeover *segTakeoverResult `json:"segtakeover,omitempty"`
	Versions    *versionsResult    `json:"versions,omitempty"`
	Profiles    []profileResult    `json:"profiles,omitempty"`
	Experiments []modeRun          `json:"experiments,omitempty"`
	Errors      []string           `json:"errors,omitempty"`
	Scenarios   []scenarioRun      `json:"scenarios"`
	WallSeconds float64            `json:"wall_s"`
	// Previous is an earlier run's headline, shown beside this one's.
	Previous *prevHeadline `json:"previous,omitempty"`
}

// prevHeadline is the headline of an earlier run: measured value by measure.
type prevHeadline struct {
	Started  string            `json:"started"`
	Commit   string            `json:"commit"`
	Measured map[string]string `json:"measured"`
}

// previousHeadline renders prev's headline and keeps its measured column.
func previousHeadline(prev *results) *prevHeadline {
	var b strings.Builder
	headline(func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }, prev)
	p := &prevHeadline{Started: prev.Machine.Started, Commit: prev.Machine.Commit, Measured: map[string]string{}}
	for _, line := range strings.Split(b.String(), "\n") {
		cells := headlineCells(line)
		if len(cells) == 4 && cells[0] != "measure" && !strings.HasPrefix(cells[0], "---") {
			p.Measured[cells[0]] = cells[2]
		}
	}
	return p
}

// headlineCells splits a table row into its trimmed cells, or nil.
func headlineCells(line string) []string {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "|") || !strings.HasSuffix(line, "|") {
		return nil
	}
	cells := strings.Split(line[1:len(line)-1], " | ")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	return cells
}

type serverInfo struct {
	Version       string    `json:"version"`
	Private       bool      `json:"private"`
	Durable       bool      `json:"durable"`
	Settings      []setting `json:"settings"`
	PGSS          bool      `json:"pg_stat_statements"`
	CommitTS      bool      `json:"track_commit_timestamp"`
	CPUMeasurable bool      `json:"db_cpu_measurable"`
}

type configInfo struct {
	CommandLine string   `json:"command_line"`
	Quick       bool     `json:"quick"`
	Seed        uint64   `json:"seed"`
	Scenarios   []string `json:"scenarios"`
	Merged      []string `json:"merged,omitempty"`
}

func (r *results) save(dir string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding results: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), b, 0o644); err != nil {
		return fmt.Errorf("writing results.json: %w", err)
	}
	return nil
}

func (r *results) addCommand(s string) {
	for _, c := range r.Commands {
		if c == s {
			return
		}
	}
	r.Commands = append(r.Commands, s)
}

// scenarioRun records how long a scenario took and how loaded the machine
// was around it (other work shares it).
type scenarioRun struct {
	Name       string  `json:"name"`
	Seconds    float64 `json:"seconds"`
	LoadBefore string  `json:"loadavg_before"`
	LoadAfter  string  `json:"loadavg_after"`
}

// forget drops the results of scenarios about to be measured again, so a
// merged run replaces them.
func (r *results) forget(scenarios []string) {
	for _, s := range scenarios {
		switch s {
		case "throughput":
			r.Throughput = nil
		case "events":
			r.Events = nil
		case "peers":
			r.Peers = nil
		case "coordination":
			r.Coord = nil
		case "failover":
			r.Failover = nil
		case "micro":
			r.Micro = nil
		case "horizon":
			r.Horizon = nil
		case "scale":
			r.Scale = nil
		case "shapes":
			r.Shapes = nil
		case "rerate":
			r.Rerate = nil
		case "latency":
			r.Latency = nil
		case "segtakeover":
			r.SegTakeover = nil
		case "versions":
			r.Versions = nil
		case "profile":
			r.Profiles, r.Experiments = nil, nil
		}
		var keep []string
		for _, e := range r.Errors {
			if !strings.HasPrefix(e, s+":") {
				keep = append(keep, e)
			}
		}
		r.Errors = keep
	}
}
