package demo

import (
	"strings"
	"testing"
	"time"
)

func TestCheckSlotAndLeaderRuns(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(int64(1800000000+s), 0).UTC() }
	victims := map[string]bool{"w1": true}
	runs := []JobRun{{at(0), "w2"}, {at(1), "w1"}, {at(1), "w3"}, {at(3), "w2"}, {at(3), "w3"}}
	c := CheckSlotRuns(runs, victims, nil)
	if c.Slots != 3 || c.Repeated != 2 || len(c.Problems) != 2 {
		t.Fatalf("check: %+v; want a missing slot 2 and slot 3 repeated after a live runner", c)
	}
	l := CheckLeaderRuns([]JobRun{{at(0), "w1"}, {at(1), "w2"}, {at(2), "w3"}}, victims, nil)
	if len(l.Changes) != 2 || len(l.Problems) != 1 {
		t.Fatalf("leader check: %+v; want the move away from live w2 flagged", l)
	}
}

// A repeat or a move is excused by the log line of the worker that lost
// the run, and only by that worker's.
func TestLostRunsExcuseRepeatsAndMoves(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(int64(1800000000+s), 0).UTC() }
	var lost Lost
	w2 := `{"level":"INFO","msg":"job run started","event":"job_started","job":"tick","slot":"` + at(1).Format(time.RFC3339Nano) + `"}
not json: a job's own output
{"level":"WARN","msg":"job run completion not recorded","event":"job_fenced","job":"tick","slot":"` + at(1).Format(time.RFC3339Nano) + `"}
{"level":"WARN","msg":"job lost while held between runs","event":"job_lost","job":"lead"}
`
	w3 := `{"level":"WARN","msg":"job run stopped: lease lost","event":"job_lost","job":"tick","slot":"` + at(2).Format(time.RFC3339Nano) + `"}
`
	for w, log := range map[string]string{"w2": w2, "w3": w3} {
		if err := lost.ReadLog(w, strings.NewReader(log)); err != nil {
			t.Fatal(err)
		}
	}
	// Slot 1 repeated after w2 lost it: excused. Slot 2 repeated after
	// w2, although w3 (not w2) lost a run of it: a problem.
	runs := []JobRun{{at(1), "w2"}, {at(1), "w3"}, {at(2), "w2"}, {at(2), "w1"}}
	c := CheckSlotRuns(runs, nil, lost.Runs["tick"])
	if c.Repeated != 2 || len(c.Problems) != 1 || !strings.Contains(c.Problems[0], "slot "+at(2).Format(time.RFC3339)) {
		t.Fatalf("check: %+v; want only slot 2's repeat flagged", c)
	}
	l := CheckLeaderRuns([]JobRun{{at(0), "w2"}, {at(1), "w3"}, {at(2), "w1"}}, nil, lost.Workers["lead"])
	if len(l.Changes) != 2 || len(l.Problems) != 1 || !strings.Contains(l.Problems[0], "from w3") {
		t.Fatalf("leader check: %+v; want only the move away from w3 flagged", l)
	}
	if err := lost.ReadLog("w4", strings.NewReader(`{"event":"job_lost","job":"tick","slot":"yesterday"}`)); err == nil ||
		!strings.Contains(err.Error(), "worker w4, line 1") {
		t.Fatalf("a bad slot: %v; want an error naming the worker and line", err)
	}
}
