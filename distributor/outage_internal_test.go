package distributor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/batonhq/baton/heartbeat"
)

// The outage events follow the heartbeat: a failed beat begins an outage
// and each failed beat after it is reported with its count, a lease that
// expired locally begins one (once) and one lost to another owner does
// not, a beat cut short by a stop says nothing, a beat sent before the
// outage began ends nothing, and the first beat sent after it ends it
// with its length; a failure for want of a database begins one too.
// Config.OnHeartbeat still sees every beat.
func TestOutageEventsFollowTheHeartbeat(t *testing.T) {
	clock := clockwork.NewFakeClock()
	var got []string
	beats := 0
	d := &Distributor{log: slog.New(slog.DiscardHandler), cfg: Config{Clock: clock,
		OnHeartbeat: func(error, time.Duration, int) { beats++ },
		OnEvent: func(e Event) {
			got = append(got, fmt.Sprintf("%s attempts=%d down=%s err=%v", e.Kind, e.Attempts, e.Duration, e.Err))
		}}}
	want := func(step string, lines ...string) {
		t.Helper()
		if strings.Join(got, "\n") != strings.Join(lines, "\n") {
			t.Errorf("%s:\n got %q\nwant %q", step, got, lines)
		}
		got = nil
	}
	refused := errors.New("connection refused")

	d.emit(Event{Kind: EventLost, Err: heartbeat.ErrOwnershipLost})
	d.observeBeat(nil, 0, 3)
	want("lost to another owner, then a good beat", "lost attempts=0 down=0s err="+heartbeat.ErrOwnershipLost.Error())

	d.observeBeat(refused, time.Second, 0)
	clock.Advance(time.Second)
	d.observeBeat(refused, time.Second, 0)
	d.emit(Event{Kind: EventLost, Err: heartbeat.ErrLeaseExpired})
	want("two failed beats, then a lease expired in the outage",
		"database_unreachable attempts=1 down=0s err=connection refused",
		"database_unreachable attempts=2 down=0s err=connection refused",
		"lost attempts=0 down=0s err="+heartbeat.ErrLeaseExpired.Error())

	d.observeBeat(fmt.Errorf("stopping: %w", context.Canceled), 0, 0)
	clock.Advance(2 * time.Second)
	d.observeBeat(nil, 3*time.Second+time.Millisecond, 3) // sent before the outage began
	want("a beat cut short by a stop, and one sent before the outage")

	d.observeBeat(nil, 100*time.Millisecond, 3)
	d.observeBeat(nil, 0, 3)
	want("back", "database_reachable attempts=0 down=3s err=<nil>")

	d.emit(Event{Kind: EventLost, Err: fmt.Errorf("lease: %w", heartbeat.ErrLeaseExpired)})
	want("a lease expired locally",
		"database_unreachable attempts=0 down=0s err=lease: "+heartbeat.ErrLeaseExpired.Error(),
		"lost attempts=0 down=0s err=lease: "+heartbeat.ErrLeaseExpired.Error())
	d.observeBeat(nil, 0, 3)
	got = nil
	d.emit(Event{Kind: EventFailed, Err: errors.New("bad tiers")})
	d.emit(Event{Kind: EventFailed, Err: &net.OpError{Op: "dial", Err: refused}})
	d.emit(Event{Kind: EventClaimRoundFailed, Err: &net.OpError{Op: "dial", Err: refused}})
	want("failures: one of the processor, then two for want of a database",
		"failed attempts=0 down=0s err=bad tiers",
		"database_unreachable attempts=0 down=0s err=dial: connection refused",
		"failed attempts=0 down=0s err=dial: connection refused",
		"claim_round_failed attempts=0 down=0s err=dial: connection refused")
	if beats != 8 {
		t.Errorf("OnHeartbeat saw %d beats, want 8", beats)
	}
}
