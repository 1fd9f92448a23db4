package distributor

import (
	"context"
	"errors"
	"fmt"

	"github.com/batonhq/baton/internal/dberr"
	"github.com/batonhq/baton/internal/taskstore"
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
// stops tracking it, through handBack.
func (d *Distributor) release(h *held, reason string) {
	l := h.lease
	ctx, span := tracer.Start(context.Background(), "baton.release", d.leaseAttrs(l.Lease), trace.WithAttributes(attribute.String("baton.reason", reason)))
	var released []string
	err := d.handBack(ctx, h, func(ctx context.Context) (err error) {
		released, err = d.store.ReleaseFor(ctx, d.worker.InstanceID, reason, []partition.Lease{l.Lease})
		return err
	})
	endSpan(span, err)
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

// fail records a processing failure under lease, which hands the
// partition back with its back-off (or quarantines it), through handBack.
func (d *Distributor) fail(h *held, cause error) {
	l := h.lease
	var r taskstore.FailResult
	err := d.handBack(context.Background(), h, func(ctx context.Context) (err error) {
		r, err = d.store.Fail(ctx, d.worker.InstanceID, l.Lease, cause.Error(), d.cfg.Backoff, d.cfg.MaxBackoff, d.cfg.MaxAttempts)
		return err
	})
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

// handBack runs do, a fenced statement that gives h's partition back (a
// release, or a failure's record), and then stops tracking the lease. The
// lease is renewed until do has an outcome, so a statement slowed down (a
// busy server, the partition's row locked for a while by a load's last
// step) does not let the lease run out and the partition be taken over
// instead of handed back (after a failure, without its back-off).
// Transient errors are retried: do is fenced by version, so a retry after
// an attempt that applied unseen finds nothing to hand back (a release
// then returns no keys, a failure's record ErrFenced). do is given up,
// and the lease left to expire, only if the lease ends meanwhile (lost,
// or expired locally because renewals failed too) or the worker abandons
// its work at the shutdown timeout; its error then says why.
func (d *Distributor) handBack(ctx context.Context, h *held, do func(context.Context) error) error {
	l := h.lease
	// A renewal that no longer finds the lease is this hand-back.
	l.SetReleasing(true)
	defer d.hb.Release(l)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(l.Context(), func() { cancel(context.Cause(l.Context())) })()
	defer context.AfterFunc(d.abandon, func() { cancel(context.Cause(d.abandon)) })()
	for {
		err := do(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return errors.Join(err, context.Cause(ctx))
		}
		if !dberr.Transient(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, context.Cause(ctx))
		case <-d.cfg.Clock.After(d.cfg.Heartbeat / 4):
		}
	}
}
