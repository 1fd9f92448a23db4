// Package leaseloop is what the services that claim rows on the task
// row's ownership protocol one attempt at a time share: package leader's
// campaign and package schedule's scheduler. Poll is their loop: an
// attempt runs at once, then again after the poll interval, or sooner when
// the attempt knows when its next chance comes (the current lease's end, a
// job's next slot), or when the service is woken. InstanceID and Validate
// are their configurations' default owner name and checks. It has no API
// compatibility guarantees.
package leaseloop

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/batonhq/baton/internal/keepalive"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/schema"
)

// InstanceID is an owner name for this process: the host name,
// partition.InstanceSeparator and a random suffix.
func InstanceID() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + partition.InstanceSeparator + hex.EncodeToString(b[:])
}

// Validate checks the settings every such service has: its schema's name,
// a positive poll interval and the heartbeat's timings.
func Validate(schemaName string, poll, interval, staleAfter time.Duration, confirm int) error {
	if err := schema.Validate(schemaName); err != nil {
		return fmt.Errorf("invalid Schema: %w", err)
	}
	if poll <= 0 {
		return fmt.Errorf("poll interval must be positive, got %s", poll)
	}
	return keepalive.Config{Interval: interval, StaleAfter: staleAfter, Confirm: confirm}.Validate()
}

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
