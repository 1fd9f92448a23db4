// Package leaseloop is the loop of the services that claim rows on the
// task row's ownership protocol one attempt at a time: package leader's
// campaign and package schedule's scheduler. An attempt runs at once, then
// again after the poll interval, or sooner when the attempt knows when its
// next chance comes (the current lease's end, a job's next slot), or when
// the service is woken. It has no API compatibility guarantees.
package leaseloop

import (
	"context"
	"time"

	"github.com/jonboulle/clockwork"
)

// Poll calls attempt at once and then again until ctx ends (Poll returns
// ctx.Err()) or attempt reports done (Poll returns nil). attempt returns
// next, how long until its next chance (negative: none known), and done.
// Between attempts Poll waits poll, or next when that is sooner, or until
// wake receives (a nil wake never does).
func Poll(ctx context.Context, clock clockwork.Clock, poll time.Duration, wake <-chan struct{},
	attempt func() (next time.Duration, done bool)) error {
	timer := clock.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.Chan():
		case <-wake:
		}
		next, done := attempt()
		if done {
			return nil
		}
		wait := poll
		if next >= 0 && next < wait {
			wait = next
		}
		timer.Reset(wait)
	}
}
