package console

import (
	"strings"
	"testing"

	"github.com/batonhq/baton/partition"
)

// A takeover whose taker released the partition for rebalance before its
// first batch, after which another worker claimed and processed it, reads
// as what happened, not as a takeover still confirming: the partition is
// done, at a later version, owned by nobody.
func TestTakeoverReleasedBeforeItsFirstBatchSaysSo(t *testing.T) {
	hist := []partition.HistoryEntry{ // newest first
		{Kind: partition.EventReleased, Version: 5, Worker: "w3#3", Detail: "caught_up"},
		{Kind: partition.EventFirstBatch, Version: 4, Worker: "w3#3"},
		{Kind: partition.EventClaimed, Version: 4, Worker: "w3#3"},
		{Kind: partition.EventReleased, Version: 2, Worker: "w2#2", Detail: "rebalance"},
		{Kind: partition.EventTakeover, Version: 2, Worker: "w2#2", PrevOwner: "w1#1"},
		{Kind: partition.EventClaimed, Version: 1, Worker: "w1#1"},
	}
	got := takeovers(hist, 6, "")
	if len(got) != 1 || got[0].Time != nil {
		t.Fatalf("takeovers %+v: want one, without a takeover time", got)
	}
	want := "then released it for rebalance before a batch; w3#3 claimed it next (version 4) and processed it"
	if got[0].Outcome != want {
		t.Fatalf("outcome %q, want %q", got[0].Outcome, want)
	}
}

// Each way a claim can end before its first batch is told, and a takeover
// with no later event reads as confirming only while it is the current
// claim.
func TestTakeoverOutcomes(t *testing.T) {
	take := partition.HistoryEntry{Kind: partition.EventTakeover, Version: 2, Worker: "w2#2", PrevOwner: "w1#1"}
	for _, c := range []struct {
		name    string
		newer   []partition.HistoryEntry
		version int64
		owner   string
		want    string
	}{
		{"confirming", nil, 2, "w2#2", ""},
		{"lost", []partition.HistoryEntry{{Kind: partition.EventLost, Version: 2, Worker: "w2#2"}}, 3, "", "then lost it before a batch"},
		{"fenced", []partition.HistoryEntry{{Kind: partition.EventFenced, Version: 2, Worker: "w2#2"}}, 3, "", "then was fenced off before a batch"},
		{"failed", []partition.HistoryEntry{{Kind: partition.EventFailed, Version: 2, Worker: "w2#2"}}, 3, "", "then its first batch failed"},
		{"shutdown", []partition.HistoryEntry{{Kind: partition.EventReleased, Version: 2, Worker: "w2#2", Detail: "shutdown"}}, 3, "",
			"then released it (shutdown) before a batch"},
		{"taken over again, confirming", []partition.HistoryEntry{{Kind: partition.EventTakeover, Version: 3, Worker: "w3#3"}}, 3, "w3#3",
			"then committed no batch; w3#3 claimed it next (version 3)"},
		{"history says nothing more", nil, 7, "", "then committed no batch; its claim has ended (now version 7)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			hist := append(append([]partition.HistoryEntry(nil), c.newer...), take)
			got := takeovers(hist, c.version, c.owner)
			var outcome string
			for _, g := range got {
				if g.Version == 2 {
					outcome = g.Outcome
				}
			}
			if outcome != c.want {
				t.Fatalf("outcome %q, want %q", outcome, c.want)
			}
			if strings.Contains(outcome, "confirming") {
				t.Fatal("an ended claim reads as confirming")
			}
		})
	}
}
