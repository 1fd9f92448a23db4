package main

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/batonhq/baton/internal/dberr"
)

// outageRemind is how often a worker repeats that the database is still
// unreachable.
const outageRemind = 30 * time.Second

// outageHandler turns a database outage into one line per worker instead of
// a line per contract and retry: the first warning or error caused by an
// unreachable database logs "database unreachable" at WARN (repeated every
// outageRemind while it lasts); until a heartbeat succeeds again, the
// warnings and errors that follow from the outage (failed statements,
// partitions lost or left to expire) are logged at DEBUG only. What needs a
// human (a quarantined partition, a failure unrelated to connectivity)
// keeps its level. It also drops pgx's note of the refused TLS attempt that
// sslmode=prefer makes before connecting without TLS.
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
}

func newOutageHandler(h slog.Handler) *outageHandler {
	return &outageHandler{h: h, s: &outageState{}}
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

// consequences are the events an outage causes per partition.
var consequences = map[string]bool{"lost": true, "failed": true, "fenced": true}

func (o *outageHandler) Handle(ctx context.Context, r slog.Record) error {
	var cause error
	var event string
	attrs := make([]slog.Attr, 0, r.NumAttrs())
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok && a.Value.Kind() == slog.KindAny && cause == nil && dberr.Unreachable(err) {
			cause = err
		}
		if a.Key == "event" {
			event = a.Value.String()
		}
		attrs = append(attrs, a)
		return true
	})
	if cause == nil && r.Level >= slog.LevelWarn && (strings.HasPrefix(r.Message, "heartbeat ") ||
		event == "lost" && strings.Contains(r.Message, "lease expired locally")) {
		// Heartbeats failing, and leases ending for want of one, mean the
		// database is out of reach whatever the error says.
		cause = errors.New(r.Message)
	}
	quarantined := strings.Contains(r.Message, "quarantined")
	if r.Level >= slog.LevelWarn && !quarantined {
		o.s.mu.Lock()
		switch {
		case cause != nil && !o.s.down:
			o.s.down, o.s.since, o.s.lastWarn, o.s.suppressed = true, r.Time, r.Time, 0
			o.s.mu.Unlock()
			if err := o.emit(ctx, r.Time, slog.LevelWarn, "database unreachable, retrying (until it is back, what follows from it is logged at debug)",
				"event", "database_unreachable", "error", cleanError(cause.Error())); err != nil {
				return err
			}
			return o.demoted(ctx, r, attrs)
		case o.s.down && (cause != nil || consequences[event]):
			o.s.suppressed++
			remind := r.Time.Sub(o.s.lastWarn) >= outageRemind
			if remind {
				o.s.lastWarn = r.Time
			}
			since, n := o.s.since, o.s.suppressed
			o.s.mu.Unlock()
			if remind {
				if err := o.emit(ctx, r.Time, slog.LevelWarn, "database still unreachable, retrying",
					"event", "database_unreachable", "down_ms", r.Time.Sub(since).Milliseconds(), "suppressed", n); err != nil {
					return err
				}
			}
			return o.demoted(ctx, r, attrs)
		}
		o.s.mu.Unlock()
	}
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	out.AddAttrs(cleanAttrs(attrs)...)
	return o.h.Handle(ctx, out)
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

// heartbeat ends an outage at the first successful heartbeat.
func (o *outageHandler) heartbeat(err error) {
	if err != nil {
		return
	}
	o.s.mu.Lock()
	if !o.s.down {
		o.s.mu.Unlock()
		return
	}
	since, n := o.s.since, o.s.suppressed
	o.s.down = false
	o.s.mu.Unlock()
	now := time.Now()
	_ = o.emit(context.Background(), now, slog.LevelInfo, "database reachable again",
		"event", "database_reachable", "down_ms", now.Sub(since).Milliseconds(), "suppressed", n)
}

func cleanAttrs(attrs []slog.Attr) []slog.Attr {
	out := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		if err, ok := a.Value.Any().(error); ok && a.Value.Kind() == slog.KindAny {
			a = slog.String(a.Key, cleanError(err.Error()))
		}
		out[i] = a
	}
	return out
}

// tlsAttempt is pgx's account of the TLS attempt sslmode=prefer makes
// first; when the attempt without TLS that follows failed too, that one is
// the one that matters.
var tlsAttempt = regexp.MustCompile(`\n\t[^\n]*: tls error: [^\n]*`)

// cleanError drops the TLS attempts from a connection error's text when
// another attempt is reported, and puts a single remaining attempt on the
// same line.
func cleanError(s string) string {
	if !strings.Contains(s, "tls error: ") {
		return s
	}
	cut := tlsAttempt.ReplaceAllString(s, "")
	if !strings.Contains(cut, "\n\t") {
		return s // TLS was the only attempt: keep it
	}
	if strings.Count(cut, "\n\t") == 1 {
		cut = strings.Replace(cut, ":\n\t", ": ", 1)
	}
	return cut
}
