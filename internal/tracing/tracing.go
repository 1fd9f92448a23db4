// Package tracing configures OpenTelemetry tracing from the standard
// OTEL_* environment variables only, through the contrib autoexport
// package: OTEL_TRACES_EXPORTER=otlp|console|none, the
// OTEL_EXPORTER_OTLP_* settings, OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES.
//
// Tracing is on when OTEL_TRACES_EXPORTER or an OTLP endpoint variable is
// set (and OTEL_SDK_DISABLED is not true); otherwise the global tracer
// stays a no-op, so a worker started without any OTEL_* variable neither
// exports nor tries to reach a collector.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
)

// Enabled reports whether the environment asks for traces.
func Enabled() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	for _, v := range []string{"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		if os.Getenv(v) != "" {
			return true
		}
	}
	return false
}

// Setup installs the global tracer provider and the W3C trace-context
// propagator as the environment says, with service name serviceName unless
// OTEL_SERVICE_NAME overrides it. The returned function flushes and stops
// the exporter; call it before exiting.
func Setup(ctx context.Context, serviceName string) (shutdown func(context.Context) error, err error) {
	noop := func(context.Context) error { return nil }
	otel.SetTextMapPropagator(propagation.TraceContext{})
	if !Enabled() {
		return noop, nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return noop, fmt.Errorf("configuring the trace exporter from OTEL_* variables: %w", err)
	}
	if autoexport.IsNoneSpanExporter(exp) {
		return noop, nil
	}
	res, err := resource.Merge(
		resource.NewSchemaless(semconv.ServiceName(serviceName)),
		resource.Environment(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return noop, fmt.Errorf("building the trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}
