package distributor_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

var (
	spansOnce sync.Once
	spans     *tracetest.InMemoryExporter
)

// recordSpans installs (once per test binary: the distributor's tracer
// binds to the first global provider) a provider that keeps every span.
func recordSpans() *tracetest.InMemoryExporter {
	spansOnce.Do(func() {
		spans = tracetest.NewInMemoryExporter()
		otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans)))
	})
	return spans
}

func attrOf(s tracetest.SpanStub, key string) attribute.Value {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value
		}
	}
	return attribute.Value{}
}

// A takeover's first batch links to the previous owner's last committed
// batch, whose trace context the checkpoint carries; later batches do not.
// Confirmation, batches and the release each have their span.
func TestTakeoverFirstBatchLinksToThePreviousOwnersLastBatch(t *testing.T) {
	t.Parallel()
	exp := recordSpans()
	e := newEnv(t)
	e.addWork(100, "traced")
	g := claimAsGhost(t, e, "traced", 300*time.Millisecond)
	ctx, ghostSpan := otel.Tracer("ghost").Start(context.Background(), "ghost batch")
	if err := g.commitBatch(ctx, 30); err != nil {
		t.Fatal(err)
	}
	ghostSpan.End()

	cfg := fastConfig("heir", newEvents())
	cfg.UntilDone = true
	d := e.start(cfg, newProc())
	if err := waitDone(t, d, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	byName := map[string]int{}
	var batches, items int64
	for _, s := range exp.GetSpans() {
		if attrOf(s, "baton.worker").AsString() != d.InstanceID() || attrOf(s, "partition_key").AsString() != "traced" {
			continue
		}
		byName[s.Name]++
		if s.Name != "baton.batch" {
			continue
		}
		if v := attrOf(s, "baton.items").AsInt64(); v > 0 {
			batches++
			items += v
		}
		if attrOf(s, "baton.first_batch").AsBool() {
			if len(s.Links) != 1 || s.Links[0].SpanContext.SpanID() != ghostSpan.SpanContext().SpanID() ||
				s.Links[0].SpanContext.TraceID() != ghostSpan.SpanContext().TraceID() {
				t.Fatalf("first batch links %+v; want the ghost's batch %s", s.Links, ghostSpan.SpanContext().SpanID())
			}
			if !attrOf(s, "baton.takeover").AsBool() || attrOf(s, "baton.position").AsInt64() != 40 {
				t.Fatalf("first batch attributes %v; want a takeover to position 40", s.Attributes)
			}
		} else if len(s.Links) != 0 {
			t.Fatalf("a later batch has links %+v", s.Links)
		}
	}
	if items != 70 || batches != 7 || byName["baton.confirm"] != 1 || byName["baton.release"] != 1 {
		t.Fatalf("heir's spans %v with %d batches of %d items; want 7 batches of the 70 left, a confirm and a release", byName, batches, items)
	}
}
