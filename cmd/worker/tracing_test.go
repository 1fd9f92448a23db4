package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/batonhq/baton/internal/pgtest"
)

// span is the part of the console exporter's JSON the test reads.
type span struct {
	Name        string
	SpanContext struct{ TraceID, SpanID string }
	Attributes  []struct {
		Key   string
		Value struct{ Value any }
	}
	Links []struct {
		SpanContext struct{ TraceID, SpanID string }
	}
}

func (s span) attr(key string) (any, bool) {
	for _, a := range s.Attributes {
		if a.Key == key {
			return a.Value.Value, true
		}
	}
	return nil, false
}

// OTEL_TRACES_EXPORTER=console makes "worker run" print its spans on
// stdout: a batch span per committed batch, carrying the contract id,
// version, items and position, plus claim and release spans.
func TestConsoleTraceExporterPrintsBatchSpans(t *testing.T) {
	t.Parallel()
	c := cli{t, pgtest.NewURL(t)}
	c.mustRun("load", "--tiers", vectors+"tiers.csv", "--records", vectors+"records.csv")
	cmd := c.command("run", "--until-done", "--heartbeat", "100ms", "--stale-after", "1s", "--batch-size", "500")
	cmd.Env = append(cmd.Env, "OTEL_TRACES_EXPORTER=console", "OTEL_SERVICE_NAME=traced-worker")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("worker run: %v\n%s", err, stderr.String())
	}
	dec := json.NewDecoder(&stdout)
	byName := map[string]int{}
	contracts := map[string]bool{}
	var items float64
	for {
		var s span
		err := dec.Decode(&s)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("stdout is not the console exporter's JSON: %v", err)
		}
		byName[s.Name]++
		if s.Name != "baton.batch" {
			continue
		}
		id, ok := s.attr("contract_id")
		if !ok {
			t.Fatalf("batch span without contract_id: %+v", s)
		}
		contracts[id.(string)] = true
		for _, k := range []string{"baton.version", "baton.items", "baton.position"} {
			if _, ok := s.attr(k); !ok {
				t.Fatalf("batch span without %s: %+v", k, s)
			}
		}
		n, _ := s.attr("baton.items")
		items += n.(float64)
	}
	if byName["baton.batch"] == 0 || byName["baton.claim"] == 0 || byName["baton.release"] == 0 {
		t.Fatalf("spans by name %v; want batch, claim and release spans", byName)
	}
	if items != 3544 {
		t.Errorf("batch spans account for %v items, want all 3544 records", items)
	}
	if want := strings.Count(c.mustRun("status", "--json"), `"contract_id"`); len(contracts) != want {
		t.Errorf("batch spans name %d contracts, want %d", len(contracts), want)
	}
	if !strings.Contains(stderr.String(), "tracing on") {
		t.Errorf("the log does not say tracing is on:\n%s", stderr.String())
	}
}
