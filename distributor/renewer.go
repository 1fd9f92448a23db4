package distributor

import (
	"context"
	"database/sql/driver"
	"errors"
	"github.com/batonhq/baton/internal/leaseinfo"
	"sync"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/dberr"
	"github.com/batonhq/baton/internal/decide"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
)

// renewer renews over a pinned connection, so a heartbeat never waits for
// a pool saturated by batches nor pays for a new connection; it re-reads
// over the pool, since the pinned connection is suspect after a failure.
type renewer struct {
	conn   *pinnedConn
	store  *taskstore.Store
	worker *taskstore.Worker // its Wake is set once, in Start, before any renewal
	// wanted is how many more partitions the worker wants, published with
	// each renewal (taskstore.Worker.Wanted).
	wanted func() int
	ttl    time.Duration
	// renewBelow: leases with more left are checked, not rewritten.
	renewBelow time.Duration
}

func (r renewer) Renew(ctx context.Context, leases []partition.Lease) (out []leaseinfo.Renewal, err error) {
	err = r.conn.do(ctx, func(db bun.IDB) error {
		w := *r.worker
		w.Wanted = r.wanted()
		out, err = r.store.WithDB(db).HeartbeatBelow(ctx, w, r.ttl, r.renewBelow, leases)
		return err
	})
	return out, err
}

func (r renewer) Inspect(ctx context.Context, leases []partition.Lease) ([]leaseinfo.Owned, error) {
	return r.store.Inspect(ctx, r.worker.InstanceID, leases)
}

// pinnedConn is one connection kept for a single purpose, replaced after
// any failure that may have left it broken.
type pinnedConn struct {
	db   *dbconn.DB
	mu   sync.Mutex
	conn *bun.Conn
}

func (p *pinnedConn) do(ctx context.Context, fn func(bun.IDB) error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var err error
	// A pinned connection is not checked by the pool before use: one that
	// died with a server restart fails with driver.ErrBadConn, which
	// promises that nothing was sent. It is replaced and the call made
	// once more on a fresh connection, as the pool itself would.
	for attempt := 0; attempt < 2; attempt++ {
		if p.conn == nil {
			c, cerr := p.db.Conn(ctx)
			if cerr != nil {
				return cerr
			}
			p.conn = &c
		}
		err = fn(*p.conn)
		if err != nil && dberr.UnknownOutcome(err) {
			_ = p.conn.Close()
			p.conn = nil
		}
		if !errors.Is(err, driver.ErrBadConn) {
			break
		}
	}
	return err
}

func (p *pinnedConn) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil {
		_ = p.conn.Close()
		p.conn = nil
	}
}

// renewBelow is the lease time left below which a heartbeat rewrites a
// lease; one with more left is checked but not rewritten, which spares most
// heartbeats a write of every held row (and, the row being in the claimable
// index while it has work, an index entry). It is StaleAfter − 2 × Heartbeat,
// so a lease is rewritten about every third beat and has at least that
// much left after any successful heartbeat, but never less than
// SafetyMargin + 2 × Heartbeat, so that the local deadline always lies two
// beats beyond a successful one: with tight timings every lease is renewed
// at every beat, as before (decide.RenewBelow).
func (c Config) renewBelow() time.Duration {
	return decide.RenewBelow(c.StaleAfter, c.Heartbeat, c.SafetyMargin)
}
