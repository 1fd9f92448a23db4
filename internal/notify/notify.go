// Package notify is the wire format of baton's wake-up notifications
// (LISTEN/NOTIFY): the channel, the payloads producers, releasing workers
// and retries send, and how workers read them; and how a worker says it
// listens (its connection's application_name, its wake mode in status).
// Workers and baton's producers share it; it is not part of the public
// API, which offers the producers' methods (partition.Store) instead.
package notify

import (
	"strconv"
	"strings"
	"time"
)

// Channel is the LISTEN/NOTIFY channel on which producers and
// releasing workers announce claimable work.
const Channel = "baton_work"

// Payloads of the notifications on Channel: what changed, followed
// by a space and the kind of the partitions it concerns (see
// Payload).
const (
	// Work: a producer added work to partitions.
	Work = "work"
	// Released: a worker released partitions that still have work.
	Released = "released"
	// Retry: a quarantined partition was re-enabled.
	Retry = "retry"
	// Left: a worker stopped gracefully; it releases its partitions
	// right after, so the others' fair shares grow now.
	Left = "left"
	// Joined: a worker registered (its first heartbeat), so the
	// others' fair shares shrink now rather than at their next rebalance.
	Joined = "joined"
	// Stale: a worker found a dead worker's partitions and took only its
	// share of them, so the others look for theirs now rather than at
	// their next poll.
	Stale = "stale"
	// Resumed: an operator resumed paused partitions or a kind.
	Resumed = "resumed"
)

// Payload is the payload of a notification of reason (Work,
// Released, Retry, Left, Joined, Stale) about partitions of kind: the
// reason, a space and the kind. Workers ignore notifications about other
// kinds. Every notification that makes partitions claimable (producers'
// AddWorks, releases, hand-backs, Retry, resumes, splits, rewinds) appends a space
// and a time, in microseconds since the Unix epoch on the database's
// clock, no later than the one at which its statement made them
// claimable (Since): its transaction may commit long after, and a
// worker that hears it reads the claimable rows from that time on (it
// lowers its claim floor).
func Payload(reason, kind string) string { return reason + " " + kind }

// Parse splits a notification's payload into its reason and kind;
// kind is "" for a payload without one (sent by hand, say), which
// concerns every kind.
func Parse(payload string) (reason, kind string) {
	reason, rest, _ := strings.Cut(payload, " ")
	kind, _, _ = strings.Cut(rest, " ")
	return reason, kind
}

// Since is the time a producer's notification says its partitions
// became claimable, if it says one.
func Since(payload string) (time.Time, bool) {
	_, rest, _ := strings.Cut(payload, " ")
	_, since, ok := strings.Cut(rest, " ")
	if !ok {
		return time.Time{}, false
	}
	us, err := strconv.ParseInt(since, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMicro(us), true
}

// ListenApplicationName prefixes the application_name of a worker's
// notification connection, followed by its instance id, so operators (and
// the console) can tell listening workers from polling ones.
const ListenApplicationName = "baton-listen "

// How a worker learns of new work, as shown by status.
const (
	// WakeListen: notifications on a session connection, polling as the
	// fallback.
	WakeListen = "listen"
	// WakePoll: polling only (no session connection to listen on).
	WakePoll = "poll"
)
