package keepalive_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/batonhq/baton/internal/leaseinfo"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/batonhq/baton/internal/keepalive"
	"github.com/batonhq/baton/partition"
)

// leaseTable is a Renewer over an in-memory table of lease holders; a
// worker's is its task rows in PostgreSQL, renewed in one statement.
type leaseTable struct {
	mu     sync.Mutex
	holder map[string]int64 // partition key → version of the current claim
}

func (t *leaseTable) Renew(_ context.Context, leases []partition.Lease) ([]leaseinfo.Renewal, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var held []leaseinfo.Renewal
	for _, l := range leases {
		if t.holder[l.Key] == l.Version {
			held = append(held, leaseinfo.Renewal{Lease: l})
		}
	}
	return held, nil
}

func (t *leaseTable) Inspect(_ context.Context, leases []partition.Lease) ([]leaseinfo.Owned, error) {
	// Called to resolve a renewal whose outcome is unknown (its reply was
	// lost), which this table's never is.
	return nil, errors.New("inspect: not needed in memory")
}

// A worker that took over a partition waits for its lease to survive a
// few renewals before processing it, and stops as soon as a renewal finds
// that someone else holds it.
func Example() {
	table := &leaseTable{holder: map[string]int64{"acme": 4}}
	s, err := keepalive.New(table, keepalive.Config{
		Interval: 50 * time.Millisecond, StaleAfter: 10 * time.Second, Confirm: 3,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		panic(err)
	}
	defer s.Stop()

	// Taken over from a worker that may only be paused: confirm first.
	l := s.Track(ctx, partition.Lease{Key: "acme", Version: 4}, time.Now(), true)
	s.Now()
	<-l.Confirmed()
	fmt.Println("confirmed after at least 3 renewals:", l.Streak() >= 3)

	// Another worker claims the partition (its claim bumps the version).
	table.mu.Lock()
	table.holder["acme"] = 5
	table.mu.Unlock()
	<-l.Context().Done()
	fmt.Println("stopped:", context.Cause(l.Context()))
	fmt.Println("leases held:", len(s.Tracked()))
	// Output:
	// confirmed after at least 3 renewals: true
	// stopped: partition ownership lost
	// leases held: 0
}
