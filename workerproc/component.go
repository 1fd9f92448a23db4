package workerproc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Component is one service of a worker process. Start brings it up and
// returns once it is serving (or fails); what it runs in the background
// lives until Stop, or until the context given to Start is cancelled.
// Stop ends it and returns when it has ended, or with the context's error
// when the context ends first.
type Component interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// Funcs is a Component made of two functions; a nil one does nothing.
type Funcs struct {
	StartFunc func(ctx context.Context) error
	StopFunc  func(ctx context.Context) error
}

// Start calls StartFunc.
func (f Funcs) Start(ctx context.Context) error {
	if f.StartFunc == nil {
		return nil
	}
	return f.StartFunc(ctx)
}

// Stop calls StopFunc.
func (f Funcs) Stop(ctx context.Context) error {
	if f.StopFunc == nil {
		return nil
	}
	return f.StopFunc(ctx)
}

// Group starts components in the order they were added and stops them in
// reverse, so each one starts after, and stops before, the ones it may
// rely on. The zero Group is empty and ready to use.
type Group struct {
	// StopTimeout bounds the stop of the components already started when
	// a later one fails to start. Zero: no bound but the start context's.
	StopTimeout time.Duration

	mu      sync.Mutex
	comps   []named
	started int // comps[:started] are started
}

type named struct {
	name string
	c    Component
}

// Add appends c, under name (used in errors), to the group.
func (g *Group) Add(name string, c Component) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.comps = append(g.comps, named{name, c})
}

// Start starts every component in order. The first that fails stops the
// ones already started (in reverse, under a context that outlives ctx's
// cancellation, bounded by StopTimeout) and Start returns its error,
// wrapped with its name, joined with any error stopping the others.
func (g *Group) Start(ctx context.Context) error {
	g.mu.Lock()
	comps := g.comps[g.started:]
	g.mu.Unlock()
	for _, c := range comps {
		if err := ctx.Err(); err != nil {
			return errors.Join(fmt.Errorf("starting %s: %w", c.name, err), g.stopAfterFailure(ctx))
		}
		if err := c.c.Start(ctx); err != nil {
			return errors.Join(fmt.Errorf("starting %s: %w", c.name, err), g.stopAfterFailure(ctx))
		}
		g.mu.Lock()
		g.started++
		g.mu.Unlock()
	}
	return nil
}

func (g *Group) stopAfterFailure(ctx context.Context) error {
	ctx = context.WithoutCancel(ctx)
	if g.StopTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.StopTimeout)
		defer cancel()
	}
	return g.Stop(ctx)
}

// Stop stops the started components in reverse order. Every one is asked
// to stop even when an earlier one failed to, or ctx ended; the errors
// are wrapped with the components' names and joined.
func (g *Group) Stop(ctx context.Context) error {
	var errs []error
	for {
		g.mu.Lock()
		if g.started == 0 {
			g.mu.Unlock()
			return errors.Join(errs...)
		}
		g.started--
		c := g.comps[g.started]
		g.mu.Unlock()
		if err := c.c.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stopping %s: %w", c.name, err))
		}
	}
}

// Background is a Component running a function that returns when its
// context is cancelled (such as distributor.Distributor.Run or
// schedule.Scheduler.Run): Start runs it in a goroutine under a context
// derived from Start's, Stop cancels that context and waits for the
// function to return, or for Stop's context to end.
type Background struct {
	run    func(ctx context.Context) error
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// NewBackground returns a Background component that runs run.
func NewBackground(run func(ctx context.Context) error) *Background {
	return &Background{run: run, done: make(chan struct{})}
}

// Start runs the function in the background and returns at once.
func (b *Background) Start(ctx context.Context) error {
	ctx, b.cancel = context.WithCancel(ctx)
	go func() {
		defer close(b.done)
		b.err = b.run(ctx)
	}()
	return nil
}

// Stop cancels the function's context and waits for it to return. Its
// own error is Err's, not Stop's: Stop fails only when ctx ends first.
func (b *Background) Stop(ctx context.Context) error {
	if b.cancel == nil {
		return nil // never started
	}
	b.cancel()
	select {
	case <-b.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("still running: %w", context.Cause(ctx))
	}
}

// Done is closed when the function has returned.
func (b *Background) Done() <-chan struct{} { return b.done }

// Err is the function's error once Done is closed (nil before), except a
// context.Canceled that only says it was stopped.
func (b *Background) Err() error {
	select {
	case <-b.done:
	default:
		return nil
	}
	if errors.Is(b.err, context.Canceled) {
		return nil
	}
	return b.err
}
