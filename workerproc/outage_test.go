package workerproc

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

	"encoding/json"
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
	for _, line := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			l.t.Fatalf("log line is not JSON: %q", line)
		}
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

// event passes the distributor's event of kind k to the handler at the
// test's clock.
func (l *outageLog) event(k distributor.EventKind, attempts int, err error, down time.Duration) {
	l.o.eventHook(distributor.Event{Kind: k, Attempts: attempts, Err: err, Duration: down, At: l.now})
}

// The outage is driven by the distributor's events, not by the text of log
// lines: its start begins it and the failed heartbeat's own log line
// (which follows the event) is demoted, the consequences per partition
// are demoted, a quarantine and an unrelated failure keep their level, the
// reminder comes after outageRemind, and the distributor's "back" ends it.
func TestOutageFollowsTheDistributorsEvents(t *testing.T) {
	l := newOutageLog(t)
	beatErr := fmt.Errorf("renewing leases: %w", errors.New("server closed the connection unexpectedly"))

	l.logAt(slog.LevelWarn, "heartbeat failed", "error", errors.New("some other failure"))
	l.logAt(slog.LevelWarn, "looking for due jobs failed", "error", &net.OpError{Op: "dial", Err: errors.New("connection refused")})
	l.want("warnings before any outage", "WARN heartbeat failed", "WARN looking for due jobs failed")

	l.event(distributor.EventDatabaseUnreachable, 1, beatErr, 0)
	l.logAt(slog.LevelWarn, "heartbeat failed", "error", beatErr, "leases", 3)
	l.want("a failed heartbeat", unreachableLine, "DEBUG heartbeat failed")

	l.event(distributor.EventDatabaseUnreachable, 2, beatErr, 0)
	l.logAt(slog.LevelWarn, "heartbeat failed", "error", beatErr, "leases", 3)
	l.logAt(slog.LevelWarn, "partition lost", "event", "lost", "cause", heartbeat.ErrLeaseExpired)
	l.logAt(slog.LevelWarn, "processing failed; backing off", "event", "failed", "error", errors.New("bad tiers"))
	l.logAt(slog.LevelWarn, "looking for due jobs failed", "error", &net.OpError{Op: "dial", Err: errors.New("connection refused")})
	l.want("what follows from the outage", "DEBUG heartbeat failed", "DEBUG partition lost", "DEBUG processing failed; backing off",
		"DEBUG looking for due jobs failed")

	l.logAt(slog.LevelError, "partition quarantined after repeated failures", "event", "quarantined", "error", &net.OpError{Op: "read", Err: errors.New("reset")})
	l.logAt(slog.LevelWarn, "could not flush traces", "error", errors.New("exporter refused"))
	l.logAt(slog.LevelWarn, "job run stopped: lease lost", "event", "job_lost", "cause", heartbeat.ErrLeaseExpired.Error())
	l.logAt(slog.LevelWarn, "job run completion not recorded", "event", "job_fenced", "error", &net.OpError{Op: "read", Err: errors.New("reset")})
	l.want("what needs a human", "ERROR partition quarantined after repeated failures", "WARN could not flush traces",
		"WARN job run stopped: lease lost", "WARN job run completion not recorded")

	l.now = l.now.Add(outageRemind)
	l.logAt(slog.LevelWarn, "partition lost", "event", "lost")
	l.want("the reminder", "WARN database still unreachable, retrying", "DEBUG partition lost")

	l.event(distributor.EventDatabaseBack, 0, nil, outageRemind)
	l.logAt(slog.LevelWarn, "partition lost", "event", "lost")
	l.want("back", "INFO database reachable again", "WARN partition lost")
	l.event(distributor.EventDatabaseBack, 0, nil, 0)
	l.want("back again, without an outage")

	l.event(distributor.EventDatabaseUnreachable, 0, heartbeat.ErrLeaseExpired, 0)
	l.logAt(slog.LevelWarn, "partition lost", "event", "lost", "cause", heartbeat.ErrLeaseExpired)
	l.want("a lease expired locally", unreachableLine, "DEBUG partition lost")
}
