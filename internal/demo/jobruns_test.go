package demo

import (
	"testing"
	"time"
)

func TestCheckSlotAndLeaderRuns(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(int64(1800000000+s), 0).UTC() }
	victims := map[string]bool{"w1": true}
	runs := []JobRun{{at(0), "w2"}, {at(1), "w1"}, {at(1), "w3"}, {at(3), "w2"}, {at(3), "w3"}}
	c := CheckSlotRuns(runs, victims)
	if c.Slots != 3 || c.Repeated != 2 || len(c.Problems) != 2 {
		t.Fatalf("check: %+v; want a missing slot 2 and slot 3 repeated after a live runner", c)
	}
	l := CheckLeaderRuns([]JobRun{{at(0), "w1"}, {at(1), "w2"}, {at(2), "w3"}}, victims)
	if len(l.Changes) != 2 || len(l.Problems) != 1 {
		t.Fatalf("leader check: %+v; want the move away from live w2 flagged", l)
	}
}
