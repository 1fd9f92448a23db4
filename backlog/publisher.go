package backlog

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"time"
)

// Publisher samples the figures on its own interval (Config.SampleEvery),
// off the claim path, and keeps the latest for whoever publishes them
// (the metrics). It has the Start/Stop shape of baton's services.
type Publisher struct {
	r   *Reader
	log *slog.Logger

	mu     sync.Mutex
	latest []Figures
	err    error
	errors int64
	at     time.Time

	stop    context.CancelFunc
	done    chan struct{}
	sampled chan struct{} // closed and replaced after each sampling (tests wait on it)
}

// NewPublisher returns a Publisher over r; nil log is slog.Default().
func NewPublisher(r *Reader, log *slog.Logger) *Publisher {
	return &Publisher{r: r, log: cmp.Or(log, slog.Default()), sampled: make(chan struct{})}
}

// Start samples once at once and then every SampleEvery until Stop or
// ctx's end; it returns at once.
func (p *Publisher) Start(ctx context.Context) {
	ctx, p.stop = context.WithCancel(ctx)
	p.done = make(chan struct{})
	go func() {
		defer close(p.done)
		t := time.NewTicker(p.r.cfg.SampleEvery)
		defer t.Stop()
		for {
			p.sample(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Stop stops the sampling and waits for it; it is idempotent.
func (p *Publisher) Stop() {
	if p.stop == nil {
		return
	}
	p.stop()
	<-p.done
}

func (p *Publisher) sample(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, max(p.r.cfg.SampleEvery, time.Second))
	defer cancel()
	figs, err := p.r.Sample(ctx)
	if err != nil && ctx.Err() == nil {
		p.log.Warn("could not read the backlog", "error", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil {
		p.latest, p.at = figs, time.Now()
	} else {
		p.errors++
	}
	p.err = err
	close(p.sampled)
	p.sampled = make(chan struct{})
}

// Latest returns the figures of the last successful sampling, when it
// was taken (local clock; zero before the first) and the last sampling's
// error.
func (p *Publisher) Latest() ([]Figures, time.Time, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.latest, p.at, p.err
}

// Errors is how many samplings failed.
func (p *Publisher) Errors() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.errors
}

// Sampled returns a channel closed at the end of the next sampling.
func (p *Publisher) Sampled() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sampled
}
