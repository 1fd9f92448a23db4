package tracing

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

func clearEnv(t *testing.T) {
	for _, v := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		t.Setenv(v, "")
	}
}

func TestOffWithoutOTELVariables(t *testing.T) {
	clearEnv(t)
	if Enabled() {
		t.Fatal("enabled without any OTEL_* variable")
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	if !Enabled() {
		t.Fatal("an OTLP endpoint does not enable tracing")
	}
	t.Setenv("OTEL_SDK_DISABLED", "true")
	if Enabled() {
		t.Fatal("OTEL_SDK_DISABLED=true does not disable tracing")
	}
}

func TestSetupFollowsTheExporterVariable(t *testing.T) {
	clearEnv(t)
	ctx := context.Background()
	before := otel.GetTracerProvider()
	t.Cleanup(func() { otel.SetTracerProvider(before) })

	for _, v := range []string{"", "none"} {
		t.Setenv("OTEL_TRACES_EXPORTER", v)
		stop, err := Setup(ctx, "test")
		if err != nil {
			t.Fatalf("OTEL_TRACES_EXPORTER=%q: %v", v, err)
		}
		if _, sdk := otel.GetTracerProvider().(*sdktrace.TracerProvider); sdk {
			t.Fatalf("OTEL_TRACES_EXPORTER=%q installed a tracer provider", v)
		}
		if err := stop(ctx); err != nil {
			t.Fatal(err)
		}
	}

	t.Setenv("OTEL_TRACES_EXPORTER", "carrier-pigeon")
	if _, err := Setup(ctx, "test"); err == nil {
		t.Fatal("an unknown exporter is accepted")
	}

	t.Setenv("OTEL_TRACES_EXPORTER", "console")
	stop, err := Setup(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	if _, sdk := otel.GetTracerProvider().(*sdktrace.TracerProvider); !sdk {
		t.Fatal("OTEL_TRACES_EXPORTER=console installed no tracer provider")
	}
	if err := stop(ctx); err != nil {
		t.Fatal(err)
	}
}
