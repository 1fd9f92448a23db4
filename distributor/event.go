package distributor

import (
	"time"

	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
)

// EventKind names a protocol event. It is partition.EventKind, the one
// vocabulary of baton's events: the history recorded in the events table
// and the runtime events passed to Config.OnEvent share it. The names are
// stable: they are also the "event" attribute of the corresponding log
// lines.
type EventKind = partition.EventKind

// Protocol events.
const (
	EventClaimed     EventKind = partition.EventClaimed     // a claim compare-and-set was won (Takeover: of an expired lease)
	EventClaimLost   EventKind = partition.EventClaimLost   // claim attempts lost to other workers (Items counts them)
	EventConfirmed   EventKind = partition.EventConfirmed   // a takeover survived Confirm heartbeats
	EventCheckpoint  EventKind = partition.EventCheckpoint  // a batch committed (Items, Position, Duration)
	EventReleased    EventKind = partition.EventReleased    // handed back (Reason: caught_up, rebalance, paused, shutdown, no_room)
	EventLost        EventKind = partition.EventLost        // ownership lost, lease expired locally, or left to expire because releasing failed (Err)
	EventFenced      EventKind = partition.EventFenced      // a commit was rejected by the fence
	EventFailed      EventKind = partition.EventFailed      // a batch failed; the partition backs off (Attempts, Err)
	EventQuarantined EventKind = partition.EventQuarantined // a partition failed MaxAttempts times (Attempts, Err)
	EventSplit       EventKind = partition.EventSplit       // a partition's backlog was split into segments (Items: how many; Position: where its checkpoint moved)

	// EventClaimRoundFailed: a claim round (cluster load, candidates,
	// claim) failed and is retried after a back-off (Err; Attempts counts
	// consecutive failures).
	EventClaimRoundFailed EventKind = partition.EventClaimRoundFailed

	// EventNotReplicated: a batch committed on the primary, but PostgreSQL
	// reported that its synchronous standby did not confirm the commit
	// (dbconn.ErrNotReplicated): a failover before the standby catches up
	// may lose it (Position: the checkpoint it committed). Nothing needs
	// doing: output and checkpoint commit together, so a lost batch is
	// priced again by whoever holds the partition after the failover.
	EventNotReplicated EventKind = partition.EventNotReplicated
)

// Event is one protocol event, passed to Config.OnEvent.
type Event struct {
	Kind     EventKind     // what happened
	Worker   string        // instance id
	Key      string        // the partition
	Version  int64         // the claim's version
	Takeover bool          // claimed: the previous owner's lease had expired
	Items    int           // checkpoint: items in the batch
	Position int64         // checkpoint position after the event
	Attempts int           // failed: attempts so far
	Reason   string        // released: caught_up, rebalance, paused, shutdown or no_room (riders.go)
	Duration time.Duration // how long the step took (batch, confirmation)
	Err      error         // the cause, for lost, fenced and failed
	At       time.Time     // when, by the local clock
}

// reportClaim emits and logs a won claim.
func (d *Distributor) reportClaim(c taskstore.Claimed) {
	d.emit(Event{Kind: EventClaimed, Key: c.Key, Version: c.Version, Takeover: c.Takeover, Position: c.Position})
	d.log.Info("claimed partition", "event", string(EventClaimed), d.cfg.KeyAttr, c.Key, "version", c.Version,
		"takeover", c.Takeover, "position", c.Position, "pending", c.Available-c.Position)
}

// reportCheckpoint emits and logs a committed batch.
func (d *Distributor) reportCheckpoint(l partition.Lease, items, position int64, elapsed time.Duration) {
	d.emit(Event{Kind: EventCheckpoint, Key: l.Key, Version: l.Version, Items: int(items), Position: position, Duration: elapsed})
	d.log.Debug("checkpoint committed", "event", string(EventCheckpoint), d.cfg.KeyAttr, l.Key, "version", l.Version,
		"position", position, "items", items, "elapsed_ms", elapsed.Milliseconds())
}

// reportNotReplicated emits and logs a batch commit of l, to position,
// that PostgreSQL reported as not confirmed by its synchronous standby.
func (d *Distributor) reportNotReplicated(l partition.Lease, position int64) {
	d.emit(Event{Kind: EventNotReplicated, Key: l.Key, Version: l.Version, Position: position})
	d.log.Warn("batch committed on the primary but not confirmed by the synchronous standby: a failover may lose it, and it would then be processed again",
		"event", string(EventNotReplicated), d.cfg.KeyAttr, l.Key, "version", l.Version, "position", position)
}
