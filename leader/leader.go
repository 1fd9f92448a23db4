// Package leader elects one leader per name among any number of processes
// sharing a PostgreSQL database: the cluster-lock mode in which the lease
// outlives any single task, so the same process keeps the role until it
// dies or resigns.
//
// # Use
//
// Create an Elector over the database (New) and Start it; Campaign blocks
// until this process leads the name and returns the Leadership, whose Token
// grows with every change of leader. Do the leader's work while Done is
// open (or under Context), and make every database write that must come
// from the leader only in a transaction that calls Check first: such a
// write cannot commit once another leader has been elected. Pass Token to
// other systems so that they can refuse an earlier leader's writes. Resign
// hands the role over at once; Stop without resigning lets it run out.
//
// # Protocol
//
// A leadership is a row of table leaderships with the task row's ownership
// columns: version, owner, heartbeat_at and lease_expires_at, all decided
// on the database clock. The version is the fencing token: it grows with
// every change of leader, and only two statements change it, both after
// locking the row FOR UPDATE. Each step takes these row locks:
//
//   - Campaign, in one statement, inserts the row if there is none (a
//     concurrent insert of the same name waits on the primary key, then
//     inserts nothing), or, when its lease has run out, locks it FOR UPDATE
//     SKIP LOCKED and takes it over, bumping version. A locked row is
//     skipped: the attempt loses and the candidate tries again after
//     PollInterval, rather than hold a connection waiting. A row changed
//     since the statement began is re-read at its newest version before it
//     is locked, and left alone if its lease is live again, so two
//     candidates cannot both win.
//   - Check locks the row FOR KEY SHARE, where version, owner and a lease
//     live at the time of the check match, until the caller's transaction
//     ends.
//   - Renewals (the heartbeat service, package heartbeat) lock the leader's
//     rows FOR NO KEY UPDATE and extend the lease. That lock does not
//     conflict with FOR KEY SHARE, so a leader's checked transactions never
//     delay its own renewals; it waits only for a takeover or resignation
//     statement in progress on the row.
//   - Resign locks the row FOR UPDATE, waiting for the leadership's checked
//     transactions to end, then bumps version and clears owner.
//
// FOR UPDATE conflicts with FOR KEY SHARE, so the version cannot move past a
// leader's token while a transaction that passed its Check is open: every
// write fenced by Check commits before the next leader is elected, and a
// Check of the old token after that fails (a Check waiting behind the change
// re-reads the row and finds the new version). So two leaders' fenced
// writes cannot both commit under overlapping leaderships. The price is that
// a checked transaction left open holds the next leader off until it ends;
// keep them short, and let the server end abandoned ones
// (idle_in_transaction_session_timeout).
//
// The leader's lease is renewed with its local deadline: if renewals stop
// succeeding, the leadership's Done channel closes SafetyMargin before the
// lease can run out on the database, so a cut-off leader stops acting
// before anybody else can be elected. A candidate that takes over from a
// leader whose lease ran out (rather than one that resigned) waits for
// Confirm renewals before Campaign returns, so a leader that was merely
// paused has time to notice its loss.
//
// # Failure semantics
//
// A leader that crashes is replaced StaleAfter after its last renewal, or
// once the server has ended the transactions it had checked, if that is
// later. A leader that is paused (SIGSTOP, VM freeze) past its lease loses
// the role; when it resumes its Done channel is already closed or closes at
// the first renewal, and writes fenced with Check fail with ErrNotLeader. A
// leader paused inside a checked transaction keeps the next one waiting
// until that transaction ends; if the server ended it, its commit fails.
// Writes to other systems should carry the token, so that they can refuse
// a lower one.
package leader

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/uptrace/bun"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/heartbeat"
	"github.com/batonhq/baton/internal/keepalive"
	"github.com/batonhq/baton/internal/leaseloop"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/schema"
)

// ErrNotLeader is returned by Check when the leadership has been lost.
var ErrNotLeader = errors.New("no longer the leader")

// Config configures an Elector.
type Config struct {
	// Schema is the PostgreSQL schema holding baton's tables. Defaults to
	// schema.Default ("baton").
	Schema string
	// InstanceID names this process as owner. Defaults to host name + "#"
	// + a random suffix.
	InstanceID string
	// Heartbeat is the renewal interval. Defaults to
	// heartbeat.IntervalDefault.
	Heartbeat time.Duration
	// StaleAfter is the lease length. Defaults to
	// heartbeat.StaleAfterDefault.
	StaleAfter time.Duration
	// Confirm is how many renewals a takeover waits for before Campaign
	// returns. Defaults to heartbeat.ConfirmDefault.
	Confirm int
	// PollInterval is the longest a candidate waits between attempts; it
	// also retries as soon as the current lease would run out (but waits
	// PollInterval again when that lease's row is still locked, by a
	// transaction the last leader checked). Defaults to Heartbeat.
	PollInterval time.Duration
	// Clock is the local clock (waits and local deadlines only). Defaults
	// to the real clock.
	Clock clockwork.Clock
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.InstanceID == "" {
		c.InstanceID = leaseloop.InstanceID()
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = heartbeat.IntervalDefault
	}
	if c.StaleAfter == 0 {
		c.StaleAfter = heartbeat.StaleAfterDefault
	}
	if c.Confirm == 0 {
		c.Confirm = heartbeat.ConfirmDefault
	}
	if c.PollInterval == 0 {
		c.PollInterval = c.Heartbeat
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func (c Config) validate() error {
	return leaseloop.Validate(c.Schema, c.PollInterval, c.Heartbeat, c.StaleAfter, c.Confirm)
}

// Elector campaigns for leaderships and keeps those won. Start it before
// campaigning; Stop ends every leadership it holds without resigning (they
// run out), so call Resign first for a prompt hand-over.
type Elector struct {
	db  bun.IDB
	cfg Config
	hb  *keepalive.Service
}

// New returns an elector over db (from dbconn.Open or dbconn.Wrap); cfg
// is validated.
func New(db *dbconn.DB, cfg Config) (*Elector, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("invalid elector config: %w", err)
	}
	hb, err := keepalive.New(leaseTable(db, cfg.Schema, cfg.InstanceID, cfg.StaleAfter), keepalive.Config{Interval: cfg.Heartbeat, StaleAfter: cfg.StaleAfter, Confirm: cfg.Confirm,
		Clock: cfg.Clock, Logger: cfg.Logger, KeyAttr: "leadership"})
	if err != nil {
		return nil, fmt.Errorf("invalid elector config: %w", err)
	}
	return &Elector{db: db, cfg: cfg, hb: hb}, nil
}

// InstanceID is the owner name this elector campaigns under.
func (e *Elector) InstanceID() string { return e.cfg.InstanceID }

// Start starts renewing leaderships in the background.
func (e *Elector) Start(ctx context.Context) error { return e.hb.Start(ctx) }

// Stop stops renewing; leaderships held end locally at their deadline and
// on the database when their lease runs out.
func (e *Elector) Stop() { e.hb.Stop() }

// Leadership is a won election.
type Leadership struct {
	// Name is what was campaigned for.
	Name string
	// Token is the fencing token: the leadership row's version, higher for
	// every later leader.
	Token int64

	e     *Elector
	lease *keepalive.Lease
}

// Done is closed when the leadership is lost (or resigned).
func (l *Leadership) Done() <-chan struct{} { return l.lease.Context().Done() }

// Context is cancelled when the leadership ends; its cause says why
// (heartbeat.ErrOwnershipLost, heartbeat.ErrLeaseExpired,
// heartbeat.ErrReleased).
func (l *Leadership) Context() context.Context { return l.lease.Context() }

// Check locks the leadership row inside tx if l still holds it, and returns
// ErrNotLeader otherwise. The lock (FOR KEY SHARE) lasts until tx ends and
// conflicts with every change of leader (a takeover or a resignation locks
// the row FOR UPDATE first), so writes in tx after Check commit only under
// this leadership: no later leader is elected before tx ends. Keep such
// transactions short: one left open holds the next leader off.
//
// A Check waiting for the row behind a resignation or a takeover in progress
// fails once that commits.
func (l *Leadership) Check(ctx context.Context, tx bun.Tx) error {
	// The lease is compared with clock_timestamp(), the time the row is
	// read, just before it is locked. now() is the start of tx, which may
	// be long before the check: a transaction begun while the lease was
	// live would pass it after the lease ran out. statement_timestamp() is
	// the arrival of this statement, which can also trail the lock: when
	// the row was changed while the statement waited for it, PostgreSQL
	// re-reads the newest version and re-evaluates this condition, and a
	// volatile clock_timestamp() is then read again, at the time of the
	// lock. Once the lock is held the lease may run out: no other candidate
	// can take over before tx ends.
	var one int
	err := tx.QueryRowContext(ctx, schema.SQL(l.e.cfg.Schema, `
		SELECT 1 FROM {{.Schema}}.leaderships
		WHERE name = ? AND version = ? AND owner = ? AND lease_expires_at > clock_timestamp()
		FOR KEY SHARE`), l.Name, l.Token, l.e.cfg.InstanceID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("leadership %s token %d: %w", l.Name, l.Token, ErrNotLeader)
	}
	if err != nil {
		return fmt.Errorf("checking leadership %s: %w", l.Name, err)
	}
	return nil
}

// Resign gives the leadership up: the row is left claimable and the next
// candidate is elected without waiting for confirmation. It locks the row
// FOR UPDATE first, so it waits (bounded by ctx) for this leadership's
// transactions that passed Check to end: when it returns, none of them can
// still commit. Do not call it while holding such a transaction open.
func (l *Leadership) Resign(ctx context.Context) error {
	defer l.e.hb.Release(l.lease)
	_, err := l.e.db.ExecContext(ctx, schema.SQL(l.e.cfg.Schema, `
		WITH held AS (
			SELECT name FROM {{.Schema}}.leaderships
			WHERE name = ? AND version = ? AND owner = ?
			FOR UPDATE
		)
		UPDATE {{.Schema}}.leaderships l
		SET version = l.version + 1, owner = NULL, heartbeat_at = NULL, lease_expires_at = '-infinity'
		FROM held
		WHERE l.name = held.name`), l.Name, l.Token, l.e.cfg.InstanceID)
	if err != nil {
		return fmt.Errorf("resigning leadership %s: %w", l.Name, err)
	}
	return nil
}

// Campaign blocks until this elector is the leader for name, or ctx ends.
// The leadership lasts while the elector's renewals succeed; watch Done.
func (e *Elector) Campaign(ctx context.Context, name string) (*Leadership, error) {
	var l *Leadership
	var err error
	stopped := leaseloop.Poll(ctx, e.cfg.Clock, e.cfg.PollInterval, nil, func() (time.Duration, bool) {
		var next time.Duration
		l, next, err = e.attempt(ctx, name)
		return next, l != nil || err != nil
	})
	if l == nil && err == nil {
		err = stopped
	}
	return l, err
}

// attempt is one campaign attempt. It returns the leadership when won (and,
// after a takeover, confirmed), or how long until the current lease runs
// out (negative: unknown, try again after PollInterval), or ctx's error.
func (e *Elector) attempt(ctx context.Context, name string) (*Leadership, time.Duration, error) {
	sent := e.cfg.Clock.Now()
	won, takeover, remaining, err := e.try(ctx, name)
	switch {
	case err == nil && won == 0 && remaining == 0:
		// The lease had run out, but the row was locked (by a
		// transaction the last leader checked, or by a statement of
		// another candidate or of a renewal) or renewed meanwhile. Try
		// again after PollInterval.
		e.cfg.Logger.Debug("lease ran out but the leadership row is locked, not taking over yet",
			"event", "row_locked", "leadership", name)
		return nil, -1, nil
	case err != nil && ctx.Err() != nil:
		return nil, 0, ctx.Err()
	case err != nil:
		e.cfg.Logger.Warn("campaign attempt failed", "event", "error", "leadership", name, "error", err)
		return nil, -1, nil
	case won == 0:
		return nil, remaining, nil
	}
	lease := e.hb.Track(context.WithoutCancel(ctx), partition.Lease{Key: name, Version: won}, sent, takeover)
	l := &Leadership{Name: name, Token: won, e: e, lease: lease}
	if takeover {
		e.hb.Now()
		select {
		case <-lease.Confirmed():
		case <-lease.Context().Done():
			return nil, 0, nil // lost before confirmation: campaign again
		case <-ctx.Done():
			e.hb.Release(lease)
			return nil, 0, ctx.Err()
		}
	}
	e.cfg.Logger.Info("elected leader", "event", "elected", "leadership", name, "token", won,
		"takeover", takeover)
	return l, 0, nil
}

// try claims the leadership if nobody holds a live lease on it. It returns
// the new version when won (0 otherwise), whether a previous leader's lease
// had to run out, and otherwise how long the current lease has left (-1:
// no row; 0: the lease has run out but the row was locked).
//
// It runs in one statement. A name without a row is inserted; a concurrent
// insert of the same name waits on the primary key and then inserts
// nothing. A row whose lease has run out is locked FOR UPDATE SKIP LOCKED
// before its version is bumped: FOR UPDATE conflicts with the FOR KEY SHARE
// of a transaction that passed the last leader's Check, so no takeover
// happens while one is open; SKIP LOCKED makes this attempt lose rather
// than wait behind it. A row changed since the statement began is re-read
// at its newest version before it is locked, and skipped if its lease is
// live again, so two candidates cannot both win.
func (e *Elector) try(ctx context.Context, name string) (won int64, takeover bool, remaining time.Duration, err error) {
	var us, version sql.NullInt64
	var prevOwned sql.NullBool
	err = e.db.QueryRowContext(ctx, schema.SQL(e.cfg.Schema, `
		WITH expired AS MATERIALIZED (
			SELECT name, owner IS NOT NULL AS owned FROM {{.Schema}}.leaderships
			WHERE name = ?0 AND lease_expires_at <= now()
			FOR UPDATE SKIP LOCKED
		),
		taken AS (
			UPDATE {{.Schema}}.leaderships l
			SET version = l.version + 1, owner = ?1, elected_at = now(), heartbeat_at = now(),
			    lease_expires_at = now() + ?2::interval
			FROM expired
			WHERE l.name = expired.name
			RETURNING l.version, expired.owned
		),
		created AS (
			INSERT INTO {{.Schema}}.leaderships (name, version, owner, elected_at, heartbeat_at, lease_expires_at)
			SELECT ?0, 1, ?1, now(), now(), now() + ?2::interval
			WHERE NOT EXISTS (SELECT FROM {{.Schema}}.leaderships WHERE name = ?0)
			ON CONFLICT (name) DO NOTHING
			RETURNING version
		)
		SELECT coalesce((SELECT version FROM taken), (SELECT version FROM created)),
		       (SELECT owned FROM taken),
		       (SELECT (extract(epoch FROM greatest(lease_expires_at, now()) - now()) * 1000000)::bigint
		        FROM {{.Schema}}.leaderships WHERE name = ?0)`),
		name, e.cfg.InstanceID, fmt.Sprintf("%d microseconds", e.cfg.StaleAfter.Microseconds())).Scan(&version, &prevOwned, &us)
	if err != nil {
		return 0, false, 0, fmt.Errorf("campaigning for %s: %w", name, err)
	}
	remaining = -1
	if us.Valid {
		remaining = max(0, time.Duration(us.Int64)*time.Microsecond)
	}
	return version.Int64, version.Valid && prevOwned.Bool, remaining, nil
}
