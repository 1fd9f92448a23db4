package console

import (
	"fmt"
	"time"

	"github.com/batonhq/baton/partition"
)

// takeover is one takeover of a partition, its claim joined with its first
// batch: who took it from whom, and how long after the old owner's last
// heartbeat the new owner's first batch committed. Without a first batch,
// Outcome says what became of the claim instead (released, lost, replaced
// by a later claim), and is empty only while the claim is the
// partition's current one: confirming, no batch yet.
type takeover struct {
	At       time.Time
	From, To string
	Version  int64
	Time     *time.Duration
	Outcome  string
}

// takeovers pairs each takeover in a history (newest first) with the first
// batch of the same claim, and shows that batch's takeover time on the
// takeover's row too. A takeover without one is told by what ended its
// claim, and by the claim that followed it, so that a partition whose
// taker released it (a rebalance) before processing anything does not read
// as still confirming; version and owner are the partition's current
// claim (its row's version and owner instance).
func takeovers(hist []partition.HistoryEntry, version int64, owner string) []takeover {
	first := map[int64]*time.Duration{}
	batched := map[int64]bool{}
	for _, e := range hist {
		if e.Kind == partition.EventFirstBatch {
			first[e.Version] = e.TakeoverTime
			batched[e.Version] = true
		}
	}
	var out []takeover
	for i, e := range hist {
		if e.Kind != partition.EventTakeover {
			continue
		}
		hist[i].TakeoverTime = first[e.Version]
		t := takeover{At: e.At, From: e.PrevOwner, To: e.Worker, Version: e.Version, Time: first[e.Version]}
		if !batched[e.Version] {
			t.Outcome = claimOutcome(hist[:i], e, batched, version, owner)
		}
		out = append(out, t)
	}
	return out
}

// claimOutcome says what became of claim c, a takeover without a first
// batch, from the events after it (newer, newest first): "" while it is
// the partition's current claim.
func claimOutcome(newer []partition.HistoryEntry, c partition.HistoryEntry, batched map[int64]bool, version int64, owner string) string {
	var end, next *partition.HistoryEntry
	for i := len(newer) - 1; i >= 0; i-- { // oldest first
		e := &newer[i]
		switch {
		case end == nil && e.Version == c.Version && ended(e.Kind):
			end = e
		case next == nil && e.Version > c.Version && (e.Kind == partition.EventClaimed || e.Kind == partition.EventTakeover):
			next = e
		}
	}
	if end == nil && next == nil && version == c.Version && owner == c.Worker {
		return ""
	}
	out := "then committed no batch"
	if end != nil {
		out = endedBy(*end)
	}
	if next != nil {
		out += fmt.Sprintf("; %s claimed it next (version %d)", next.Worker, next.Version)
		if batched[next.Version] {
			out += " and processed it"
		}
	} else if end == nil {
		out += fmt.Sprintf("; its claim has ended (now version %d)", version)
	}
	return out
}

// ended reports whether an event of kind k ends the claim it belongs to.
func ended(k partition.EventKind) bool {
	switch k {
	case partition.EventReleased, partition.EventLost, partition.EventFenced, partition.EventFailed, partition.EventQuarantined:
		return true
	}
	return false
}

// endedBy tells how event e ended a claim before its first batch.
func endedBy(e partition.HistoryEntry) string {
	switch e.Kind {
	case partition.EventReleased:
		switch e.Detail {
		case "rebalance":
			return "then released it for rebalance before a batch"
		case "":
			return "then released it before a batch"
		}
		return "then released it (" + e.Detail + ") before a batch"
	case partition.EventLost:
		return "then lost it before a batch"
	case partition.EventFenced:
		return "then was fenced off before a batch"
	}
	return "then its first batch failed"
}
