package distributor

import (
	"context"
	"errors"
	"fmt"

	"github.com/batonhq/baton/internal/dberr"
	"github.com/batonhq/baton/partition"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

func (d *Distributor) lost(h *held, cause error) {
	l := h.lease
	d.hb.Release(l)
	d.record(partition.EventLost, l.Lease, cause)
	d.emit(Event{Kind: EventLost, Key: l.Key, Version: l.Version, Err: cause})
	d.log.Warn("partition lost", "event", "lost", d.cfg.KeyAttr, l.Key, "version", l.Version, "cause", cause)
}

// release hands the partition back in the database (fenced by version) and
// stops tracking it. The lease is renewed until the release has an
// outcome, so a release slowed down (a busy server, its row locked for a
// while by a load's last step) does not let the lease run out and the
// partition be taken over instead of handed back. The release is given
// up, and the lease left to expire, only if the lease ends meanwhile
// (lost, or expired locally because renewals failed too) or the worker
// abandons its work at the shutdown timeout.
func (d *Distributor) release(h *held, reason string) {
	l := h.lease
	// A renewal that no longer finds the lease is this release.
	l.SetReleasing(true)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	defer context.AfterFunc(l.Context(), func() { cancel(context.Cause(l.Context())) })()
	defer context.AfterFunc(d.abandon, func() { cancel(context.Cause(d.abandon)) })()
	ctx, span := tracer.Start(ctx, "baton.release", d.leaseAttrs(l.Lease), trace.WithAttributes(attribute.String("baton.reason", reason)))
	var released []string
	var err error
	defer func() { endSpan(span, err) }()
	for {
		// Releasing twice is harmless: it is fenced by version, so a retry
		// after an attempt that applied unseen finds nothing to release.
		released, err = d.store.ReleaseFor(ctx, d.worker.InstanceID, reason, []partition.Lease{l.Lease})
		if err == nil || !dberr.Transient(err) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-d.cfg.Clock.After(d.cfg.Heartbeat / 4):
		}
	}
	if err != nil && ctx.Err() != nil {
		err = errors.Join(err, context.Cause(ctx))
	}
	d.hb.Release(l)
	if err != nil {
		err = fmt.Errorf("releasing %s: %w", l.Lease, err)
		d.emit(Event{Kind: EventLost, Key: l.Key, Version: l.Version, Err: err})
		d.log.Warn("release failed; the lease will expire instead", "event", "lost", d.cfg.KeyAttr, l.Key,
			"version", l.Version, "error", err)
		return
	}
	if len(released) == 0 {
		d.emit(Event{Kind: EventLost, Key: l.Key, Version: l.Version, Err: partition.ErrFenced})
		return
	}
	d.emit(Event{Kind: EventReleased, Key: l.Key, Version: l.Version, Reason: reason})
	d.log.Info("released partition", "event", "released", d.cfg.KeyAttr, l.Key, "version", l.Version, "reason", reason)
}

func (d *Distributor) fail(h *held, cause error) {
	l := h.lease
	d.hb.Release(l)
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.StaleAfter/2)
	defer cancel()
	r, err := d.store.Fail(ctx, d.worker.InstanceID, l.Lease, cause.Error(), d.cfg.Backoff, d.cfg.MaxBackoff, d.cfg.MaxAttempts)
	if err != nil {
		d.emit(Event{Kind: EventLost, Key: l.Key, Version: l.Version,
			Err: fmt.Errorf("recording failure of %s (%v): %w", l.Lease, cause, err)})
		d.log.Error("processing failed and the failure could not be recorded; the lease will expire",
			"event", "lost", d.cfg.KeyAttr, l.Key, "version", l.Version, "error", cause, "record_error", err)
		return
	}
	kind := EventFailed
	if r.Quarantined {
		kind = EventQuarantined
	}
	d.emit(Event{Kind: kind, Key: l.Key, Version: l.Version, Err: cause, Attempts: r.Attempts})
	if r.Quarantined {
		d.log.Error("partition quarantined after repeated failures", "event", string(EventQuarantined), d.cfg.KeyAttr, l.Key,
			"version", l.Version, "attempts", r.Attempts, "error", cause)
		return
	}
	d.log.Warn("processing failed; backing off", "event", "failed", d.cfg.KeyAttr, l.Key, "version", l.Version,
		"attempts", r.Attempts, "retry_in_ms", r.RetryAfter.Milliseconds(), "error", cause)
}
