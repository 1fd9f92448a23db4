package workerproc_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/batonhq/baton/workerproc"
)

// journal records the components' starts and stops in order.
type journal struct {
	mu  sync.Mutex
	log []string
}

func (j *journal) add(s string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.log = append(j.log, s)
}

func (j *journal) String() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return strings.Join(j.log, " ")
}

// comp is a component that records itself in j and fails to start with
// startErr.
func comp(j *journal, name string, startErr error) workerproc.Component {
	return workerproc.Funcs{
		StartFunc: func(context.Context) error {
			if startErr != nil {
				j.add("fail:" + name)
				return startErr
			}
			j.add("start:" + name)
			return nil
		},
		StopFunc: func(context.Context) error { j.add("stop:" + name); return nil },
	}
}

func TestGroupStartsInOrderAndStopsInReverse(t *testing.T) {
	var j journal
	var g workerproc.Group
	for _, n := range []string{"a", "b", "c"} {
		g.Add(n, comp(&j, n, nil))
	}
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := g.Stop(context.Background()); err != nil { // nothing left to stop
		t.Fatal(err)
	}
	if got, want := j.String(), "start:a start:b start:c stop:c stop:b stop:a"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// A component that fails to start stops the ones started before it, in
// reverse, and is named in the error; the ones after it never start.
func TestGroupStartFailureStopsTheStarted(t *testing.T) {
	var j journal
	var g workerproc.Group
	boom := errors.New("address in use")
	g.Add("a", comp(&j, "a", nil))
	g.Add("b", comp(&j, "b", nil))
	g.Add("c", comp(&j, "c", boom))
	g.Add("d", comp(&j, "d", nil))
	err := g.Start(context.Background())
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "starting c: address in use") {
		t.Fatalf("Start: %v, want starting c: %v", err, boom)
	}
	if got, want := j.String(), "start:a start:b fail:c stop:b stop:a"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// A start context already cancelled starts nothing more, and stops what
// was started.
func TestGroupStartCancelled(t *testing.T) {
	var j journal
	var g workerproc.Group
	ctx, cancel := context.WithCancel(context.Background())
	g.Add("a", comp(&j, "a", nil))
	g.Add("cancel", workerproc.Funcs{StartFunc: func(context.Context) error { cancel(); return nil }})
	g.Add("b", comp(&j, "b", nil))
	err := g.Start(ctx)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "starting b") {
		t.Fatalf("Start: %v", err)
	}
	if got, want := j.String(), "start:a stop:a"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// Stop honours its context: a component that does not stop in time fails
// with the context's error, named, and the components before it are
// still asked to stop.
func TestGroupStopHonoursContext(t *testing.T) {
	var j journal
	var g workerproc.Group
	release := make(chan struct{})
	defer close(release)
	stuck := workerproc.NewBackground(func(ctx context.Context) error {
		<-release // ignores its context
		return nil
	})
	g.Add("a", comp(&j, "a", nil))
	g.Add("stuck", stuck)
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := g.Stop(ctx)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "stopping stuck: still running") {
		t.Fatalf("Stop: %v", err)
	}
	if got, want := j.String(), "start:a stop:a"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	select {
	case <-stuck.Done():
		t.Fatal("the stuck function returned")
	default:
	}
}

// Background: Stop cancels the function's context and waits for it; its
// error is Err's, without the cancellation that stopped it.
func TestBackground(t *testing.T) {
	ranCtx := make(chan context.Context, 1)
	b := workerproc.NewBackground(func(ctx context.Context) error {
		ranCtx <- ctx
		<-ctx.Done()
		return ctx.Err()
	})
	if err := b.Err(); err != nil {
		t.Fatalf("Err before it ran: %v", err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := <-ranCtx
	if err := b.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ctx.Err() == nil {
		t.Fatal("Stop did not cancel the function's context")
	}
	<-b.Done()
	if err := b.Err(); err != nil {
		t.Fatalf("Err after a stop: %v", err)
	}

	boom := errors.New("boom")
	f := workerproc.NewBackground(func(context.Context) error { return boom })
	if err := f.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-f.Done()
	if err := f.Err(); !errors.Is(err, boom) {
		t.Fatalf("Err: %v, want %v", err, boom)
	}
	if err := f.Stop(context.Background()); err != nil {
		t.Fatalf("Stop after the function failed: %v", err)
	}
}
