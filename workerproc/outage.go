package workerproc

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/dberr"
)

// outageRemind is how often a worker repeats that the database is still
// unreachable.
const outageRemind = 30 * time.Second

// outageHandler is the process's log during a database outage: one line
// per worker instead of a line per partition and retry, from every
// component (the distributor, the jobs, the backlog and metrics). The distributor says when the database
// is unreachable and when it is back (distributor.EventDatabaseUnreachable
// and EventDatabaseBack, from its heartbeat; see eventHook): at the first
// it logs "database unreachable" at WARN (repeated every outageRemind
// while it lasts), at the second "database reachable again". Meanwhile the
// warnings and errors that follow from the outage (the heartbeat's own
// failure, errors of an unreachable database, and the events lost, failed
// and fenced it causes per partition) are logged at DEBUG only. What needs
// a human (a quarantined partition, a job run lost or not recorded, a
// failure unrelated to connectivity) keeps its level. It also drops pgx's note of the refused TLS attempt that
// sslmode=prefer makes before connecting without TLS (dberr.Message).
type outageHandler struct {
	h slog.Handler
	s *outageState
}

type outageState struct {
	mu         sync.Mutex
	down       bool
	since      time.Time
	lastWarn   time.Time
	suppressed int
	beatErr    error // the failure the heartbeat reported last: its own log line follows
}

func newOutageHandler(h slog.Handler) *outageHandler {
	return &outageHandler{h: h, s: &outageState{}}
}

// over is a handler writing to h that shares o's outage.
func (o *outageHandler) over(h slog.Handler) *outageHandler {
	return &outageHandler{h: h, s: o.s}
}

func (o *outageHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || o.h.Enabled(ctx, l)
}

func (o *outageHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &outageHandler{h: o.h.WithAttrs(cleanAttrs(attrs)), s: o.s}
}

func (o *outageHandler) WithGroup(name string) slog.Handler {
	return &outageHandler{h: o.h.WithGroup(name), s: o.s}
}

// keepsLevel are the events that need a human even during an outage: a
// quarantined partition, and a job run whose lease was lost or whose
// completion was not recorded (its slot may run again elsewhere: the
// line says which run that was).
var keepsLevel = map[string]bool{
	string(distributor.EventQuarantined): true, "job_lost": true, "job_fenced": true,
}

// consequences are the events an outage causes per partition.
var consequences = map[string]bool{
	string(distributor.EventLost): true, string(distributor.EventFailed): true, string(distributor.EventFenced): true,
}

func (o *outageHandler) Handle(ctx context.Context, r slog.Record) error {
	var cause error
	var errs []error
	var event string
	attrs := make([]slog.Attr, 0, r.NumAttrs())
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok && a.Value.Kind() == slog.KindAny {
			errs = append(errs, err)
			if cause == nil && dberr.Unreachable(err) {
				cause = err
			}
		}
		if a.Key == "event" {
			event = a.Value.String()
		}
		attrs = append(attrs, a)
		return true
	})
	if r.Level >= slog.LevelWarn && !keepsLevel[event] && o.follows(cause, event, errs) {
		if err := o.suppress(ctx, r.Time); err != nil {
			return err
		}
		return o.demoted(ctx, r, attrs)
	}
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	out.AddAttrs(cleanAttrs(attrs)...)
	return o.h.Handle(ctx, out)
}

// begin starts an outage at t caused by cause, unless one is under way.
func (o *outageHandler) begin(ctx context.Context, t time.Time, cause error) error {
	o.s.mu.Lock()
	if o.s.down {
		o.s.mu.Unlock()
		return nil
	}
	o.s.down, o.s.since, o.s.lastWarn, o.s.suppressed = true, t, t, 0
	o.s.mu.Unlock()
	return o.emit(ctx, t, slog.LevelWarn, "database unreachable, retrying (until it is back, what follows from it is logged at debug)",
		"event", "database_unreachable", "error", dberr.Message(cause))
}

// follows reports whether a warning with these attributes follows from the
// outage under way.
func (o *outageHandler) follows(cause error, event string, errs []error) bool {
	o.s.mu.Lock()
	defer o.s.mu.Unlock()
	if !o.s.down {
		return false
	}
	if cause != nil || consequences[event] {
		return true
	}
	for _, err := range errs {
		if o.s.beatErr != nil && errors.Is(err, o.s.beatErr) {
			return true
		}
	}
	return false
}

// suppress counts a line demoted at t and repeats that the database is
// still unreachable when outageRemind has passed since it last said so.
func (o *outageHandler) suppress(ctx context.Context, t time.Time) error {
	o.s.mu.Lock()
	o.s.suppressed++
	remind := t.Sub(o.s.lastWarn) >= outageRemind
	if remind {
		o.s.lastWarn = t
	}
	since, n := o.s.since, o.s.suppressed
	o.s.mu.Unlock()
	if !remind {
		return nil
	}
	return o.emit(ctx, t, slog.LevelWarn, "database still unreachable, retrying",
		"event", "database_unreachable", "down_ms", t.Sub(since).Milliseconds(), "suppressed", n)
}

// demoted passes r on at DEBUG.
func (o *outageHandler) demoted(ctx context.Context, r slog.Record, attrs []slog.Attr) error {
	if !o.h.Enabled(ctx, slog.LevelDebug) {
		return nil
	}
	out := slog.NewRecord(r.Time, slog.LevelDebug, r.Message, r.PC)
	out.AddAttrs(cleanAttrs(attrs)...)
	return o.h.Handle(ctx, out)
}

func (o *outageHandler) emit(ctx context.Context, t time.Time, l slog.Level, msg string, args ...any) error {
	r := slog.NewRecord(t, l, msg, 0)
	r.Add(args...)
	return o.h.Handle(ctx, r)
}

// eventHook is the distributor's OnEvent hook: EventDatabaseUnreachable
// begins an outage (and, from a failed heartbeat, names the failure whose
// own log line follows the hook, to be demoted), EventDatabaseBack ends it.
func (o *outageHandler) eventHook(e distributor.Event) {
	switch e.Kind {
	case distributor.EventDatabaseUnreachable:
		if e.Attempts > 0 {
			o.s.mu.Lock()
			o.s.beatErr = e.Err
			o.s.mu.Unlock()
		}
		_ = o.begin(context.Background(), e.At, e.Err)
	case distributor.EventDatabaseBack:
		o.s.mu.Lock()
		o.s.beatErr = nil
		if !o.s.down {
			o.s.mu.Unlock()
			return
		}
		o.s.down = false
		n := o.s.suppressed
		o.s.mu.Unlock()
		_ = o.emit(context.Background(), e.At, slog.LevelInfo, "database reachable again",
			"event", "database_reachable", "down_ms", e.Duration.Milliseconds(), "suppressed", n)
	}
}

func cleanAttrs(attrs []slog.Attr) []slog.Attr {
	out := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		if err, ok := a.Value.Any().(error); ok && a.Value.Kind() == slog.KindAny {
			a = slog.String(a.Key, dberr.Message(err))
		}
		out[i] = a
	}
	return out
}
