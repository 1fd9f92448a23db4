package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/heartbeat"
)

// outageLog is an outage handler over a JSON log at debug level, with a
// clock the test moves.
type outageLog struct {
	t   *testing.T
	buf bytes.Buffer
	o   *outageHandler
	log *slog.Logger
	now time.Time
}

func newOutageLog(t *testing.T) *outageLog {
	l := &outageLog{t: t, now: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)}
	l.o = newOutageHandler(slog.NewJSONHandler(&l.buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	l.o.s.now = func() time.Time { return l.now }
	l.log = slog.New(l.o)
	return l
}

// logAt logs a record at the test's clock.
func (l *outageLog) logAt(level slog.Level, msg string, args ...any) {
	r := slog.NewRecord(l.now, level, msg, 0)
	r.Add(args...)
	if err := l.o.Handle(context.Background(), r); err != nil {
		l.t.Fatal(err)
	}
}

// lines returns the lines logged since the last call as "LEVEL msg".
func (l *outageLog) lines() []string {
	var out []string
	for _, m := range logLines(l.t, l.buf.String()) {
		out = append(out, fmt.Sprintf("%s %s", m["level"], m["msg"]))
	}
	l.buf.Reset()
	return out
}

func (l *outageLog) want(step string, want ...string) {
	l.t.Helper()
	got := l.lines()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		l.t.Errorf("%s:\n got %q\nwant %q", step, got, want)
	}
}

const unreachableLine = "WARN database unreachable, retrying (until it is back, what follows from it is logged at debug)"

// The outage is driven by the typed values of the distributor's hooks, not
// by the text of log lines: a failed heartbeat begins it and its own log
// line (which follows the hook) is demoted, the consequences per partition
// are demoted, a quarantine and an unrelated failure keep their level, the
// reminder comes after outageRemind, and a successful heartbeat ends it.
func TestOutageFollowsTheHooks(t *testing.T) {
	l := newOutageLog(t)
	beatErr := fmt.Errorf("renewing leases: %w", errors.New("server closed the connection unexpectedly"))

	l.logAt(slog.LevelWarn, "heartbeat failed", "error", errors.New("some other failure"))
	l.want("a warning before any outage", "WARN heartbeat failed")

	l.o.heartbeatHook(beatErr, 0)
	l.logAt(slog.LevelWarn, "heartbeat failed", "error", beatErr, "leases", 3)
	l.want("a failed heartbeat", unreachableLine, "DEBUG heartbeat failed")

	l.o.heartbeatHook(beatErr, 0)
	l.logAt(slog.LevelWarn, "heartbeat failed", "error", beatErr, "leases", 3)
	l.logAt(slog.LevelWarn, "partition lost", "event", "lost", "cause", heartbeat.ErrLeaseExpired)
	l.logAt(slog.LevelWarn, "processing failed; backing off", "event", "failed", "error", errors.New("bad tiers"))
	l.want("what follows from the outage", "DEBUG heartbeat failed", "DEBUG partition lost", "DEBUG processing failed; backing off")

	l.logAt(slog.LevelError, "partition quarantined after repeated failures", "event", "quarantined", "error", &net.OpError{Op: "read", Err: errors.New("reset")})
	l.logAt(slog.LevelWarn, "could not flush traces", "error", errors.New("exporter refused"))
	l.want("what needs a human", "ERROR partition quarantined after repeated failures", "WARN could not flush traces")

	l.now = l.now.Add(outageRemind)
	l.logAt(slog.LevelWarn, "partition lost", "event", "lost")
	l.want("the reminder", "WARN database still unreachable, retrying", "DEBUG partition lost")

	l.o.heartbeatHook(fmt.Errorf("stopping: %w", context.Canceled), 0)
	l.o.heartbeatHook(nil, l.now.Sub(l.o.s.since)+time.Millisecond)
	l.want("a heartbeat sent before the outage began, which got through")
	l.o.heartbeatHook(nil, 0)
	l.logAt(slog.LevelWarn, "partition lost", "event", "lost")
	l.want("back", "INFO database reachable again", "WARN partition lost")

	l.o.heartbeatHook(nil, 0)
	l.o.heartbeatHook(fmt.Errorf("stopping: %w", context.Canceled), 0)
	l.want("a heartbeat cut short by a stop")
}

// A lease that expired locally begins an outage; one lost to another
// owner does not. An unreachable database in a logged error does too.
func TestOutageFromEventsAndErrors(t *testing.T) {
	l := newOutageLog(t)
	l.o.eventHook(distributor.Event{Kind: distributor.EventLost, Err: heartbeat.ErrOwnershipLost})
	l.o.eventHook(distributor.Event{Kind: distributor.EventFailed, Err: heartbeat.ErrLeaseExpired})
	l.want("lost to another owner, and a failed batch")

	l.o.eventHook(distributor.Event{Kind: distributor.EventLost, Err: fmt.Errorf("lease: %w", heartbeat.ErrLeaseExpired)})
	l.logAt(slog.LevelWarn, "partition lost", "event", "lost", "cause", heartbeat.ErrLeaseExpired)
	l.want("a lease expired locally", unreachableLine, "DEBUG partition lost")
	l.o.heartbeatHook(nil, 0)
	l.want("back", "INFO database reachable again")

	l.logAt(slog.LevelWarn, "looking for due jobs failed", "error", &net.OpError{Op: "dial", Err: errors.New("connection refused")})
	l.logAt(slog.LevelWarn, "looking for due jobs failed", "error", &net.OpError{Op: "dial", Err: errors.New("connection refused")})
	l.want("an unreachable database in a logged error", unreachableLine, "DEBUG looking for due jobs failed", "DEBUG looking for due jobs failed")
}
