package distributor

import (
	"context"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
)

// pruneInterval is how often a worker prunes the events table.
const pruneInterval = time.Minute

func newStore(db *dbconn.DB, cfg Config) *taskstore.Store {
	// The coordination statements are prepared on direct connections only:
	// a transaction pooler may run each on another server session.
	s := taskstore.NewStore(db, cfg.Schema).Kind(cfg.Kind).PrepareWhen(db.Direct).
		FloorPolicy(cfg.FloorMargin, cfg.FullReadInterval, cfg.Clock.Now)
	if cfg.DisableEvents {
		return s.WithoutEvents()
	}
	return s
}

// record writes an event no protocol statement carries (a fence rejection,
// a lost lease). It is best effort and bounded: the history is for
// operators, and a worker cut off from the database must not wait on it.
func (d *Distributor) record(kind EventKind, l partition.Lease, cause error) {
	ctx, cancel := context.WithTimeout(d.base, d.cfg.StaleAfter/4)
	defer cancel()
	detail := ""
	if cause != nil {
		detail = cause.Error()
	}
	if err := d.store.Record(ctx, d.worker.InstanceID, kind, l, detail); err != nil {
		d.log.Debug("could not record event", "kind", kind, d.cfg.KeyAttr, l.Key, "version", l.Version, "error", err)
	}
}

// pruneEvents keeps the events table within EventRetention and
// EventMaxRows. Every worker does it about once a pruneInterval; the
// deletes use indexes and find little to do when another worker has just
// pruned.
func (d *Distributor) pruneEvents(ctx context.Context) {
	if d.cfg.DisableEvents {
		return
	}
	n, err := d.store.PruneEvents(ctx, d.cfg.EventRetention, d.cfg.EventMaxRows)
	if err != nil {
		d.log.Warn("could not prune events", "error", err)
		return
	}
	if n > 0 {
		d.log.Debug("pruned events", "deleted", n)
	}
}
