package distributor

import (
	"context"
	"errors"
	"fmt"
	"github.com/batonhq/baton/internal/notify"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/dberr"
	"github.com/batonhq/baton/internal/pgxconn"
	"github.com/jackc/pgx/v5"
)

// listenHandle returns the handle to LISTEN on: Config.ListenDB, or a
// handle it opens on the main handle's ListenURL, or the main handle, or
// nil (poll only) when the main handle goes through a transaction pooler
// and no direct connection was given, where a LISTEN would be tied to
// whichever server connection ran it and its notifications would go
// astray. It connects once to find out.
func (d *Distributor) listenHandle(ctx context.Context) (*dbconn.DB, error) {
	if err := d.ping(ctx, d.db); err != nil {
		return nil, fmt.Errorf("connecting worker %s: %w", d.worker.InstanceID, err)
	}
	if d.cfg.PollOnly {
		return nil, nil
	}
	ldb := d.cfg.ListenDB
	if ldb == nil && d.db.ListenURL() != "" {
		url := d.db.ListenURL()
		db, err := dbconn.Open(url, dbconn.Options{ApplicationName: "baton-listen", MaxOpenConns: 2})
		if err != nil {
			return nil, fmt.Errorf("opening the listen connection of worker %s: %w", d.worker.InstanceID, err)
		}
		d.ownListen, ldb = db, db // closed by Start if it fails, else at the stop
	}
	if ldb == nil {
		if d.db.Pooled() {
			d.log.Info("the database connection goes through a transaction pooler: polling for work every interval (give a direct listen connection to be woken at once)",
				"poll_interval", d.cfg.PollInterval)
			return nil, nil
		}
		return d.db, nil
	}
	if err := d.ping(ctx, ldb); err != nil {
		return nil, fmt.Errorf("connecting the listen connection of worker %s: %w", d.worker.InstanceID, err)
	}
	if ldb.Pooled() {
		return nil, errors.New("the listen connection goes through a transaction pooler: LISTEN needs a direct session connection to PostgreSQL")
	}
	return ldb, nil
}

// ping connects to db, again while the database cannot be reached (a
// connection reset, a server restarting or failing over) until ctx ends:
// Start's bound. Any other error (a refused password, say) is returned at
// once.
func (d *Distributor) ping(ctx context.Context, db *dbconn.DB) error {
	wait := 50 * time.Millisecond
	for {
		err := db.PingContext(ctx)
		if err == nil || !dberr.Unreachable(err) || ctx.Err() != nil {
			return err
		}
		d.log.Debug("connecting: database not reachable yet; trying again", "error", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return err
		case <-d.cfg.Clock.After(wait):
		}
		wait = min(2*wait, max(d.cfg.PollInterval, 50*time.Millisecond))
	}
}

// listen wakes the claim loop (and leader partitions) on notifications.
// Polling remains the fallback when the listening connection is down.
func (d *Distributor) listen(ctx context.Context, db *dbconn.DB) {
	for ctx.Err() == nil {
		err := d.listenOnce(ctx, db)
		if ctx.Err() != nil {
			return
		}
		d.log.Debug("listen connection lost; polling until it is back", "error", err)
		select {
		case <-ctx.Done():
			return
		case <-d.cfg.Clock.After(d.cfg.PollInterval):
		}
	}
}

func (d *Distributor) listenOnce(ctx context.Context, db *dbconn.DB) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return pgxconn.Raw(conn.Conn, func(pc *pgx.Conn) error {
		// The connection is closed when done, so the pool discards it
		// instead of handing out a connection that is still listening.
		defer pc.Close(context.Background())
		// Named so that operators can tell listening workers from polling
		// ones; LISTEN stays this session's last statement.
		if _, err := pc.Exec(ctx, "SELECT set_config('application_name', $1, false)",
			notify.ListenApplicationName+d.worker.InstanceID); err != nil {
			return err
		}
		if _, err := pc.Exec(ctx, "LISTEN "+pgx.Identifier{notify.Channel}.Sanitize()); err != nil {
			return err
		}
		// Notifications sent before LISTEN took effect (at start, or while
		// the connection was down) are gone: look once now, so work that
		// arrived in that window waits for nobody's poll.
		d.wake()
		d.nudgeAll()
		for {
			n, err := pc.WaitForNotification(ctx)
			if err != nil {
				return err
			}
			d.notified(n.Payload)
		}
	})
}

// notified wakes the claim loop (and leader partitions) for a notification
// and records what it means for the fair share. A worker that left changes
// the live count: the share is recomputed at once. Work added or retried
// may change the count of partitions with work, and a worker that joined
// (its first heartbeat) the live count: the share is recomputed, at most
// once a heartbeat. A release changes neither (the releasing
// worker's own departure, if it is leaving, was announced before its
// first release): the share in hand is still right and the loop claims
// with it at once.
//
// Notifications about partitions of another kind concern other workers and
// are ignored; one without a kind (sent by hand) wakes every worker.
func (d *Distributor) notified(payload string) {
	reason, kind := notify.Parse(payload)
	if kind != "" && kind != d.cfg.Kind {
		return
	}
	if since, ok := notify.Since(payload); ok {
		// Partitions became claimable then (a producer's work, a
		// release, a hand-back, a retry), maybe long before the commit:
		// read the claimable rows from there.
		d.store.LowerFloor(since)
	}
	switch reason {
	case notify.Left:
		d.workerLeft.Store(true)
	case notify.Released, notify.Stale:
	default:
		d.workChanged.Store(true)
	}
	d.wake()
	d.nudgeAll()
}
