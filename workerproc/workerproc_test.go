package workerproc_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/schedule"
	"github.com/batonhq/baton/workerproc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.WithServer(m)) }

// lockedBuffer is a log the process writes from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// skipAll is a processor that marks every item done.
var skipAll = distributor.ProcessorFunc(func(_ context.Context, b *distributor.Batch) (distributor.Result, error) {
	return distributor.Result{Position: b.Checkpoint.Available}, nil
})

func config(t *testing.T, logs *lockedBuffer) workerproc.Config {
	return workerproc.Config{
		DB: pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{}), Processor: skipAll,
		Distributor: distributor.Config{Kind: "wp", UntilDone: true, Heartbeat: 100 * time.Millisecond, StaleAfter: time.Second},
		Logger:      slog.New(slog.NewTextHandler(logs, nil)),
	}
}

// A process with every server runs its partitions to the end, starting
// the metrics server before the distributor and the jobs beside it, and
// stops them all once it is done: their addresses are closed. The
// scheduler logs its start from its own goroutine (Background), so its
// line may come before or after the distributor's.
func TestRunUntilDone(t *testing.T) {
	t.Parallel()
	logs := &lockedBuffer{}
	cfg := config(t, logs)
	ctx := context.Background()
	if _, err := partition.NewStore(cfg.DB, "").Kind("wp").AddWorks(ctx, []partition.Work{{Key: "a", N: 5}, {Key: "b", N: 3}}); err != nil {
		t.Fatal(err)
	}
	metricsAddr := freeAddr(t)
	cfg.MetricsAddr = metricsAddr
	cfg.Jobs = func(schedule.Definition) (schedule.RunFunc, bool) { return nil, false }
	p, err := workerproc.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Run(ctx); err != nil {
		t.Fatalf("Run: %v\n%s", err, logs)
	}
	out := logs.String()
	for _, order := range [][]string{
		{"serving metrics", "worker started", "worker stopped"},
		{"serving metrics", "scheduler started", "scheduler stopped"},
	} {
		last := -1
		for _, s := range order {
			i := strings.Index(out, s)
			if i < 0 || i < last {
				t.Fatalf("want %q in this order, got:\n%s", order, out)
			}
			last = i
		}
	}
	if c, err := net.Dial("tcp", metricsAddr); err == nil {
		c.Close()
		t.Fatalf("the metrics server still listens on %s after Run", metricsAddr)
	}
	parts, _, err := partition.NewStore(cfg.DB, "").Kind("wp").Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 2 {
		t.Fatalf("partitions: %+v", parts)
	}
	for _, s := range parts {
		if s.Pending != 0 || s.Processed == 0 {
			t.Fatalf("partition %+v not done", s)
		}
	}
}

// A server that cannot start fails Run with a StartError naming it, and
// the distributor (started after it) never starts.
func TestRunStartFailure(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	logs := &lockedBuffer{}
	cfg := config(t, logs)
	cfg.MetricsAddr = ln.Addr().String()
	err = workerproc.Run(context.Background(), cfg)
	var se *workerproc.StartError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "starting metrics: listening for metrics on") {
		t.Fatalf("Run: %v, want a StartError of the metrics server", err)
	}
	if strings.Contains(logs.String(), "worker started") {
		t.Fatalf("the distributor started:\n%s", logs)
	}
}

// A cancelled context stops a worker that would otherwise run on.
func TestRunStopsOnCancel(t *testing.T) {
	t.Parallel()
	logs := &lockedBuffer{}
	cfg := config(t, logs)
	cfg.Distributor.UntilDone = false
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- workerproc.Run(ctx, cfg) }()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(logs.String(), "worker started") {
		if time.Now().After(deadline) {
			t.Fatalf("the worker did not start:\n%s", logs)
		}
		time.Sleep(10 * time.Millisecond) // polling the log for the start
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after cancel: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("Run did not return after cancel:\n%s", logs)
	}
}

func TestNewRejectsAnIncompleteConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  workerproc.Config
		want string
	}{
		{"nothing", workerproc.Config{}, "no DB"},
		{"no processor", workerproc.Config{}, "no Processor"},
		{"negative stop timeout", workerproc.Config{StopTimeout: -time.Second}, "negative StopTimeout"},
	} {
		if _, err := workerproc.New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New: %v, want %q", tc.name, err, tc.want)
		}
	}
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
