package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/batonhq/baton/internal/clienv"
	"github.com/batonhq/baton/internal/pgtest"
)

// pause and resume: by name or for the kind, shown by status (text and
// JSON) with who, when and why; a whole kind only with --kind.
func TestPauseAndResumeCommands(t *testing.T) {
	t.Parallel()
	c := cli{t, pgtest.NewURL(t)}
	c.mustRun("load", "--tiers", vectors+"tiers.csv", "--records", vectors+"records.csv")
	if _, stderr, code := c.run("pause"); code != clienv.ExitUsage || !strings.Contains(stderr, "--kind") {
		t.Fatalf("pause with nothing named: exit %d, %q; want usage naming --kind", code, stderr)
	}
	c.mustRun("pause", "random-mix", "--reason", "tiers under review", "--by", "alice")
	var b struct {
		Backlog struct {
			PausedItems     int64 `json:"paused_items"`
			PausedContracts int64 `json:"paused_contracts"`
		} `json:"backlog"`
	}
	if err := json.Unmarshal([]byte(c.mustRun("status", "--json")), &b); err != nil {
		t.Fatal(err)
	}
	if b.Backlog.PausedContracts != 1 || b.Backlog.PausedItems == 0 {
		t.Fatalf("status --json backlog: %+v; want random-mix's records paused apart", b.Backlog)
	}
	c.mustRun("pause", "--kind", "pricing", "--reason", "month-end freeze")
	paused := func() []map[string]any {
		t.Helper()
		var s struct {
			Paused []map[string]any `json:"paused"`
		}
		if err := json.Unmarshal([]byte(c.mustRun("status", "--json")), &s); err != nil {
			t.Fatal(err)
		}
		return s.Paused
	}
	ps := paused()
	if len(ps) != 2 || ps[0]["contract_id"] != nil || ps[0]["reason"] != "month-end freeze" ||
		ps[1]["contract_id"] != "random-mix" || ps[1]["by"] != "alice" || ps[1]["reason"] != "tiers under review" {
		t.Fatalf("status --json paused = %v", ps)
	}
	if out := c.mustRun("status"); !strings.Contains(out, "every contract of kind pricing") || !strings.Contains(out, "tiers under review") {
		t.Fatalf("status does not show the pauses:\n%s", out)
	}
	if out := c.mustRun("resume", "--kind", "pricing"); !strings.Contains(out, "resumed kind pricing") {
		t.Fatalf("resume --kind: %q", out)
	}
	if out := c.mustRun("resume", "random-mix"); !strings.Contains(out, "resumed random-mix") {
		t.Fatalf("resume random-mix: %q", out)
	}
	if out := c.mustRun("resume", "random-mix"); !strings.Contains(out, "not paused") {
		t.Fatalf("resume of what is not paused: %q", out)
	}
	if ps := paused(); len(ps) != 0 {
		t.Fatalf("after resuming: paused = %v", ps)
	}
	c.mustRun("run", "--until-done", "--heartbeat", "100ms", "--stale-after", "1s")
	c.mustRun("export", "--complete", "--out", t.TempDir()+"/priced.csv")
}
