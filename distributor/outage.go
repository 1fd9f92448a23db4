package distributor

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/batonhq/baton/heartbeat"
	"github.com/batonhq/baton/internal/dberr"
)

// Outage events: the database as the worker finds it. A worker's
// heartbeat is its one statement that runs every interval whatever it
// holds, so its failures and its recovery say when the database is
// unreachable, once for the worker rather than once per partition and
// retry; a batch or claim that fails first, for want of a database
// (dberr.Unreachable), begins the outage a moment sooner.
const (
	// EventDatabaseUnreachable: a heartbeat failed (Err: its error;
	// Attempts: failed heartbeats in a row), or, beginning an outage, a
	// lease expired locally for want of a successful heartbeat (Err:
	// heartbeat.ErrLeaseExpired) or a statement failed because the
	// database cannot be reached (Err: its error; Attempts 0). The first
	// of an outage begins it; failed heartbeats come while it lasts. A
	// heartbeat cut short because the worker is stopping emits nothing.
	EventDatabaseUnreachable EventKind = "database_unreachable"
	// EventDatabaseBack: the first heartbeat sent after an outage began
	// succeeded, ending it (Duration: how long it lasted, by the local
	// clock). A heartbeat that was in flight when the outage began, and
	// got through as the server went down, says nothing of the database
	// now and ends nothing.
	EventDatabaseBack EventKind = "database_reachable"
)

// outage is the database's state as the heartbeat finds it.
type outage struct {
	mu     sync.Mutex
	down   bool
	since  time.Time // when the outage began
	failed int       // failed heartbeats in a row
}

// observeBeat is the heartbeat's OnBeat: it passes the beat on to
// Config.OnHeartbeat and emits the outage events.
func (d *Distributor) observeBeat(err error, latency time.Duration, renewed int) {
	if d.cfg.OnHeartbeat != nil {
		d.cfg.OnHeartbeat(err, latency, renewed)
	}
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			d.databaseUnreachable(err, true)
		}
		return
	}
	now := d.cfg.Clock.Now()
	o := &d.outage
	o.mu.Lock()
	o.failed = 0
	if !o.down || now.Add(-latency).Before(o.since) {
		o.mu.Unlock()
		return
	}
	o.down = false
	down := now.Sub(o.since)
	o.mu.Unlock()
	d.log.Debug("outage over: a heartbeat got through", "event", string(EventDatabaseBack), "down_ms", down.Milliseconds())
	d.emit(Event{Kind: EventDatabaseBack, Duration: down})
}

// observeEvent begins an outage when e is a lease that expired locally,
// for want of a successful heartbeat, or a failure (a batch's, a claim
// round's) for want of a database.
func (d *Distributor) observeEvent(e Event) {
	switch {
	case e.Kind == EventDatabaseUnreachable || e.Kind == EventDatabaseBack || e.Err == nil:
	case e.Kind == EventLost && errors.Is(e.Err, heartbeat.ErrLeaseExpired):
		d.databaseUnreachable(e.Err, false)
	default:
		d.statementFailed(e.Err)
	}
}

// statementFailed begins an outage when err, a statement's failure, says
// that the database cannot be reached (dberr.Unreachable). Call it before
// logging the failure, so that the log line follows the outage's event.
func (d *Distributor) statementFailed(err error) {
	if dberr.Unreachable(err) {
		d.databaseUnreachable(err, false)
	}
}

// databaseUnreachable emits EventDatabaseUnreachable for cause, a failed
// heartbeat (beat) or a lease that expired locally, beginning an outage
// unless one is under way. A lease's expiry during an outage adds nothing.
func (d *Distributor) databaseUnreachable(cause error, beat bool) {
	o := &d.outage
	o.mu.Lock()
	began := !o.down
	if began {
		o.down, o.since = true, d.cfg.Clock.Now()
	}
	if beat {
		o.failed++
	}
	failed := o.failed
	o.mu.Unlock()
	if !began && !beat {
		return
	}
	if began {
		d.log.Debug("outage began: the database is unreachable", "event", string(EventDatabaseUnreachable), "error", cause)
	}
	d.emit(Event{Kind: EventDatabaseUnreachable, Err: cause, Attempts: failed})
}
