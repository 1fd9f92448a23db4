package partition

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/internal/eventscan"
)

// EventKind names an event in a partition's life. It is the one
// vocabulary of baton's events: the kinds of the history recorded in the
// events table (HistoryEntry.Kind), of the distributor's runtime events
// (distributor.Event, whose EventKind is this type), and the "event"
// attribute of the corresponding log lines. The names are stable: they are
// stored, and operators' queries and alerts match them.
type EventKind string

// Event kinds recorded in the events table; all but takeover, first_batch
// and retried are also distributor events (whose claimed covers takeovers:
// see distributor.Event.Takeover).
const (
	EventClaimed     EventKind = "claimed"     // an unowned partition was claimed
	EventTakeover    EventKind = "takeover"    // a partition whose owner's lease had expired was claimed
	EventFirstBatch  EventKind = "first_batch" // the first batch of a claim committed (TakeoverMS after a takeover)
	EventReleased    EventKind = "released"    // handed back (Detail: the reason)
	EventFenced      EventKind = "fenced"      // a commit was rejected by the fence: the claim was no longer current
	EventLost        EventKind = "lost"        // the owner stopped processing: lease lost or expired locally (Detail)
	EventFailed      EventKind = "failed"      // a batch failed; back-off (Attempts, Detail: the error)
	EventQuarantined EventKind = "quarantined" // failed MaxAttempts times (Attempts, Detail)
	EventRetried     EventKind = "retried"     // an operator re-enabled the partition
	EventRewound     EventKind = "rewound"     // re-processing from Position under a new generation (Store.Rewind; Detail: the generations)
	EventSplit       EventKind = "split"       // the backlog after Position was split into segments (Detail: how many, up to where)
	EventPaused      EventKind = "paused"      // an operator paused the partition, or its kind under the key "" (Worker: who, Detail: why)
	EventResumed     EventKind = "resumed"     // an operator resumed it (Worker: who)
)

// Event kinds of the distributor's runtime events only, never recorded.
const (
	EventClaimLost        EventKind = "claim_lost"         // claim attempts lost to other workers
	EventConfirmed        EventKind = "confirmed"          // a takeover survived its confirmation heartbeats
	EventCheckpoint       EventKind = "checkpoint"         // a batch committed
	EventClaimRoundFailed EventKind = "claim_round_failed" // a claim round failed and is retried after a back-off
	// EventNotReplicated: a batch committed on the primary, but PostgreSQL
	// reported that its synchronous standby did not confirm the commit
	// (dbconn.ErrNotReplicated).
	EventNotReplicated EventKind = "not_replicated"
)

// Recorded reports whether events of kind k are written to the events
// table.
func (k EventKind) Recorded() bool {
	switch k {
	case EventClaimed, EventTakeover, EventFirstBatch, EventReleased, EventFenced, EventLost,
		EventFailed, EventQuarantined, EventRetried, EventRewound, EventSplit:
		return true
	}
	return false
}

// HistoryEntry is one row of a partition's ownership history (the
// events table); distributor.Event is what a worker sees happen, as it
// happens.
type HistoryEntry struct {
	ID           int64          // increasing with insertion
	At           time.Time      // database clock
	Key          string         // the partition
	Kind         EventKind      // one of the Event… constants
	Version      int64          // the claim the event belongs to
	Worker       string         // instance id; "" for an operator's action
	PrevOwner    string         // takeover: the owner whose lease expired
	PrevBeatAt   *time.Time     // takeover: the previous owner's last heartbeat
	Position     *int64         // checkpoint position, where known
	Items        *int64         // first batch: its items
	Attempts     *int           // failed, quarantined: attempts so far
	TakeoverTime *time.Duration // first batch after a takeover: old owner's last heartbeat → this commit
	Detail       string         // reason or error text
}

// History returns up to limit of the events of s's kind's partition key,
// newest first.
func (s *Store) History(ctx context.Context, key string, limit int) ([]HistoryEntry, error) {
	return s.readEvents(ctx, `WHERE partition_key = ? AND task_kind = ? ORDER BY event_id DESC LIMIT ?`, key, s.kind, limit)
}

// RecentEvents returns up to limit events of s's kind's partitions of the
// last since, newest first, optionally of the given event kinds only.
func (s *Store) RecentEvents(ctx context.Context, since time.Duration, limit int, kinds ...EventKind) ([]HistoryEntry, error) {
	if len(kinds) == 0 {
		return s.readEvents(ctx, `WHERE at > now() - ?::interval AND task_kind = ? ORDER BY event_id DESC LIMIT ?`,
			interval(since), s.kind, limit)
	}
	return s.readEvents(ctx, `WHERE at > now() - ?::interval AND task_kind = ? AND kind IN (?) ORDER BY event_id DESC LIMIT ?`,
		interval(since), s.kind, bun.List(kinds), limit)
}

// readEvents reads the events rows where selects, newest first.
func (s *Store) readEvents(ctx context.Context, where string, args ...any) ([]HistoryEntry, error) {
	rows, err := s.db.QueryContext(ctx, s.sql(`
		SELECT `+eventscan.Columns("e.takeover_ms")+`
		FROM {{.Schema}}.events e `+where), args...)
	if err != nil {
		return nil, fmt.Errorf("reading events: %w", err)
	}
	out, err := eventscan.Scan(rows, func(e eventscan.Row[EventKind]) HistoryEntry { return HistoryEntry(e) })
	if err != nil {
		return nil, fmt.Errorf("reading events: %w", err)
	}
	return out, nil
}

// TakeoverStats summarises the takeovers whose first batch committed in a
// window: how many, and percentiles of their takeover time.
type TakeoverStats struct {
	Count         int           // takeovers in the window
	P50, P90, P99 time.Duration // percentiles of the takeover time
	Max           time.Duration // the longest takeover time
}

// Takeovers summarises the takeovers of s's kind's partitions whose first
// batch committed within since.
func (s *Store) Takeovers(ctx context.Context, since time.Duration) (TakeoverStats, error) {
	var st TakeoverStats
	var p50, p90, p99, mx sql.NullFloat64
	err := s.db.QueryRowContext(ctx, s.sql(`
		SELECT count(*),
		       percentile_cont(0.5) WITHIN GROUP (ORDER BY takeover_ms),
		       percentile_cont(0.9) WITHIN GROUP (ORDER BY takeover_ms),
		       percentile_cont(0.99) WITHIN GROUP (ORDER BY takeover_ms),
		       max(takeover_ms)
		FROM {{.Schema}}.events
		WHERE kind = ? AND task_kind = ? AND takeover_ms IS NOT NULL AND at > now() - ?::interval`),
		EventFirstBatch, s.kind, interval(since)).Scan(&st.Count, &p50, &p90, &p99, &mx)
	if err != nil {
		return st, fmt.Errorf("reading takeover times: %w", err)
	}
	ms := func(f sql.NullFloat64) time.Duration { return time.Duration(f.Float64 * float64(time.Millisecond)) }
	st.P50, st.P90, st.P99, st.Max = ms(p50), ms(p90), ms(p99), ms(mx)
	return st, nil
}
