package distributor

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
)

// tracer records the protocol's spans: claim, confirm, batch (fence to
// commit) and release. It is the global provider's, a no-op unless the
// embedding program installs one (the worker command does, from OTEL_*
// variables).
var tracer = otel.Tracer("github.com/batonhq/baton/distributor")

// leaseAttrs are the attributes every partition span carries.
func (d *Distributor) leaseAttrs(l partition.Lease) trace.SpanStartOption {
	return trace.WithAttributes(attribute.String(d.cfg.KeyAttr, l.Key), attribute.Int64("baton.version", l.Version),
		attribute.String("baton.worker", d.worker.InstanceID))
}

// endSpan records err (if any) and ends span.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// linkPrevious links span to the batch that committed the checkpoint it
// resumes from, whose trace context the checkpoint carries: a takeover's
// first batch points at the previous owner's last one.
func linkPrevious(span trace.Span, traceparent string) {
	if traceparent == "" {
		return
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceparent})
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{
			attribute.String("baton.link", "previous checkpoint")}})
	}
}

// traceparentOf is the W3C trace context of the span in ctx, "" if none.
func traceparentOf(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}

// claimTraced is Store.Claim in a "baton.claim" span.
func (d *Distributor) claimTraced(ctx context.Context, try []taskstore.Candidate) ([]taskstore.Claimed, error) {
	ctx, span := tracer.Start(ctx, "baton.claim", trace.WithAttributes(attribute.Int("baton.candidates", len(try)),
		attribute.String("baton.worker", d.worker.InstanceID)))
	won, err := d.store.Claim(ctx, d.worker.InstanceID, d.cfg.StaleAfter, try)
	span.SetAttributes(attribute.Int("baton.won", len(won)))
	endSpan(span, err)
	return won, err
}

// endBatchSpan ends a "baton.batch" span (fence to commit) with what the
// batch did.
func endBatchSpan(span trace.Span, items int64, caughtUp bool, err error) {
	span.SetAttributes(attribute.Int64("baton.items", items), attribute.Bool("baton.caught_up", caughtUp))
	endSpan(span, err)
}
