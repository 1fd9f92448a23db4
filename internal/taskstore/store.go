package taskstore

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/batonhq/baton/internal/leaseinfo"
	"github.com/batonhq/baton/internal/notify"
	"math"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/schema"
)

// Candidate is a row that was claimable when read.
type Candidate struct {
	Key     string // the partition
	Version int64  // the version this claim set
	// Owned is true when the row still names an owner whose lease expired:
	// claiming it is a takeover, and the new owner must wait for
	// confirmation before processing.
	Owned bool
	// Backlog is its pending items (available − position) when read by
	// Candidates; StaleCandidates leaves it 0.
	Backlog int64
}

// Claimed is a won claim.
type Claimed struct {
	partition.Lease
	Takeover  bool  // the previous owner's lease had expired: wait for confirmation
	Position  int64 // checkpoint position
	Available int64 // items produced (high-water mark)
	// PrevHeartbeat is, for a takeover, the previous owner's last
	// heartbeat by the database clock (zero otherwise).
	PrevHeartbeat time.Time
}

// Worker describes a worker instance for the workers table.
type Worker struct {
	InstanceID string // name#suffix, the owner written to task rows
	Name       string // configured worker name
	Hostname   string // where it runs
	PID        int    // process id
	Mode       string // lock or leader
	// Wake is how the worker learns of new work: WakeListen or WakePoll.
	// Empty means WakeListen.
	Wake string
	// Wanted is how many more partitions the worker would claim now (room
	// below its fair share), written by each heartbeat: others hand their
	// surplus back only to a worker that wants it (Load.Wanted).
	Wanted int
}

// Store runs the protocol's statements against the tasks table, on the
// task rows of one kind (Kind; partition.DefaultKind unless set). Its
// methods are safe for concurrent use. Admin returns the producers' and
// operators' partition.Store over the same rows.
//
// A kind is the processor a partition belongs to, as a job's kind names its
// queue: several processors may share baton's schema, with partitions of
// the same names, and each sees only its own. A partition is (kind,
// partition_key); every statement of a Store, claims, renewals, fences,
// releases and failures alike (and partition.Store's), names its kind, so
// a Store of one kind can neither claim, advance nor release another
// kind's rows.
//
// Row-lock discipline (producers must follow it too):
//   - every statement that changes ownership (version) first locks the row
//     FOR UPDATE, which conflicts with a batch's fence (FOR KEY SHARE);
//   - heartbeats and work-counter updates lock FOR NO KEY UPDATE, which
//     does not wait for batches in flight; heartbeats SKIP LOCKED rows
//     rather than wait for a load; a heartbeat's hand-back of its own
//     rows past their leases (Heartbeat) is a change of ownership, FOR
//     UPDATE, and SKIP LOCKED too, so a heartbeat never waits for a task
//     row;
//   - statements locking several task rows lock them in (kind,
//     partition_key) order, so concurrent heartbeats, claims, releases and
//     loads cannot deadlock. Each of a Store's statements locks rows of its
//     own kind only, in partition_key order; a producer adding work to
//     several kinds in one transaction must add it in kind order (byte
//     order) too.
//
// Ownership changes also write the partition's history (table events) in
// the same statement; see WithoutEvents.
type Store struct {
	db       bun.IDB
	schema   string
	kind     string
	noEvents bool
	direct   func() bool // see PrepareWhen
	floor    *claimFloor // where reads of the claimable rows start (floor.go)
	version  *serverVersion
}

// NewStore returns a Store over db (a *bun.DB, a connection or a
// transaction) for the task rows of kind partition.DefaultKind in PostgreSQL schema
// schemaName; empty means schema.Default ("baton"). Every statement names
// its tables with that schema, so the session's search_path does not
// matter. Kind binds it to another kind.
func NewStore(db bun.IDB, schemaName string) *Store {
	return &Store{db: db, schema: cmp.Or(schemaName, schema.Default), kind: partition.DefaultKind,
		floor: newClaimFloor(FloorMargin, FullReadEvery, time.Now), version: &serverVersion{}}
}

// Kind returns a copy of s for the task rows of kind (empty means
// partition.DefaultKind), with a claim floor of its own: its statements
// claim, renew, fence and release rows of that kind only, and its workers
// count towards that kind's fair share only (a distributor validates its
// Config.Kind with partition.ValidateKind).
func (s *Store) Kind(kind string) *Store {
	c := *s
	c.kind = cmp.Or(kind, partition.DefaultKind)
	c.floor = newClaimFloor(s.floor.margin, s.floor.every, s.floor.now)
	return &c
}

// FloorPolicy returns a copy of s with a claim floor of its own (see
// FloorMargin): its reads of the claimable rows start margin below the
// earliest claimable row the last one found, and the first read at least
// every (by now, a local clock) after the last full read starts from the
// beginning. Zero margin or every keep FloorMargin and FullReadEvery; nil
// now is time.Now.
func (s *Store) FloorPolicy(margin, every time.Duration, now func() time.Time) *Store {
	c := *s
	if now == nil {
		now = time.Now
	}
	c.floor = newClaimFloor(cmp.Or(margin, FloorMargin), cmp.Or(every, FullReadEvery), now)
	return &c
}

// KindName is the kind of the task rows s works on.
func (s *Store) KindName() string { return s.kind }

// sql qualifies q's table names with the store's schema.
func (s *Store) sql(q string) string { return schema.SQL(s.schema, q) }

// WithDB returns a copy of s whose statements run on db, typically a
// transaction, with the same options.
func (s *Store) WithDB(db bun.IDB) *Store {
	c := *s
	c.db = db
	return &c
}

// ownedBy is how statements that name their task rows by key check the
// owner: coalesce of the owner column and the empty string equal to the
// owner, never owner = <owner>. The same rows (an owner is never empty),
// but no plan can read them through tasks_owner instead of the primary
// key. That index keeps an entry for every version that named an owner,
// and while another session holds an old snapshot none of them can be
// removed, so an owner's range in it grows with every claim the owner has
// made. With statistics taken while few rows were
// owned (a freshly loaded table), the planner took the small partial index
// for the cheaper way to one row, and a fence walked its worker's whole
// history at every batch. Only the statements that look for an owner's
// rows without knowing their keys (the heartbeat's own rows, a dead
// worker's stale ones) read tasks_owner.
func ownedBy(col, owner string) string { return "coalesce(" + col + ", '') = " + owner }

// lockOwnLeases is the subquery that locks an owner's leases, given as
// the kind, parallel key and version arrays and the owner, in
// partition_key order with the given lock strength and wait policy
// (constants, never input): FOR UPDATE to change ownership, FOR NO KEY
// UPDATE SKIP LOCKED to renew.
func lockOwnLeases(strength, wait string) string {
	return `
			SELECT t.kind, t.partition_key
			FROM {{.Schema}}.tasks t
			JOIN unnest(?::text[], ?::bigint[]) AS h(key, version)
			  ON t.kind = ? AND t.partition_key = h.key AND t.version = h.version
			WHERE ` + ownedBy("t.owner", "?") + `
			ORDER BY t.partition_key
			FOR ` + strength + ` OF t ` + wait + `
		`
}

func split(leases []partition.Lease) (keys []string, versions []int64) {
	keys = make([]string, len(leases))
	versions = make([]int64, len(leases))
	for i, l := range leases {
		keys[i], versions[i] = l.Key, l.Version
	}
	return keys, versions
}

// Candidates returns up to limit claimable rows of s's kind: with pending
// work, not quarantined, and unowned (with no back-off left) or stale
// (StaleCandidates), earliest-claimable first. It reads only the head of
// the kind's range of the tasks_claimable index, from s's floor (see
// FloorMargin), and the rows of workers that are not live.
func (s *Store) Candidates(ctx context.Context, limit int) ([]Candidate, error) {
	read := s.floor.begin()
	rows, err := s.query(ctx, candidatesSQL, limit, s.kind, read.arg)
	if err != nil {
		return nil, fmt.Errorf("reading claim candidates: %w", err)
	}
	defer rows.Close()
	var (
		out      []Candidate
		earliest = math.NaN() // none
		now      float64
	)
	for rows.Next() {
		var (
			c  Candidate
			at float64
		)
		if err := rows.Scan(&c.Key, &c.Version, &c.Owned, &at, &now, &c.Backlog); err != nil {
			return nil, fmt.Errorf("reading claim candidates: %w", err)
		}
		if !c.Owned && math.IsNaN(earliest) {
			earliest = at
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading claim candidates: %w", err)
	}
	s.floor.saw(read, earliest, now, len(out) < limit)
	return out, nil
}

// LowerFloor has s's next reads of the claimable rows start no later than
// the floor's margin before since: partitions became claimable then, in a
// transaction that committed since (the notification that announced them
// says when: PayloadSince). Reads in flight, which may have missed them,
// do not raise the floor again.
func (s *Store) LowerFloor(since time.Time) { s.floor.lower(since) }

// PendingWork reports whether any partition of s's kind has pending work
// that is not quarantined, owned or not. It reads from the beginning of
// the tasks_claimable index, so it walks every entry a held snapshot
// keeps there: call it rarely (before deciding all work is done).
func (s *Store) PendingWork(ctx context.Context) (bool, error) {
	var pending bool
	if err := s.db.QueryRowContext(ctx, s.sql(`
		SELECT EXISTS (SELECT 1 FROM {{.Schema}}.tasks WHERE kind = ? AND claimable_at IS NOT NULL)
		    OR EXISTS (SELECT 1 FROM {{.Schema}}.workers w
		               CROSS JOIN LATERAL (SELECT 1 FROM {{.Schema}}.tasks t
		                 WHERE t.owner = w.instance_id AND t.kind = ? AND t.available > t.position
		                   AND t.failed_at IS NULL LIMIT 1) t)`), s.kind, s.kind).Scan(&pending); err != nil {
		return false, fmt.Errorf("looking for pending work: %w", err)
	}
	return pending, nil
}

func scanCandidates(rows *sql.Rows) ([]Candidate, error) {
	defer rows.Close()
	var out []Candidate
	for rows.Next() {
		var c Candidate
		if err := rows.Scan(&c.Key, &c.Version, &c.Owned); err != nil {
			return nil, fmt.Errorf("reading claim candidates: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading claim candidates: %w", err)
	}
	return out, nil
}

// StaleCandidates is Candidates restricted to stale rows: owned by a
// worker that is not live (its registration expired, it stopped, or it
// never registered: see Claim) and past their own lease. These are the
// partitions of dead (or cut-off) workers. Workers at their fair share
// still take these, so a takeover never waits for a rebalance. A live
// worker's row past its lease is not stale: that worker's next heartbeat
// hands it back (Heartbeat), and it is claimable as an unowned row.
//
// No index covers the lease (heartbeats renew it, and they stay heap-only
// updates): it reads the workers table (one row per instance) and, through
// the tasks_owner index, the rows of the instances that are not live.
func (s *Store) StaleCandidates(ctx context.Context, limit int) ([]Candidate, error) {
	rows, err := s.query(ctx, staleCandidatesSQL, limit, s.kind)
	if err != nil {
		return nil, fmt.Errorf("reading stale claim candidates: %w", err)
	}
	return scanCandidates(rows)
}

// Claim tries to claim every candidate with one compare-and-set statement:
// a row is won only if it is of s's kind, its version is still the one
// read and it is still claimable. It returns the claims won; the rest went to someone else.
// The lease runs for ttl from the database's now(). Outside a transaction
// the same statement raises the claimer's held count in workers (see
// FairShareLoad); inside one (WithDB(tx)) the claims are counted from the
// claimer's next heartbeat. Release lowers it alike. An owner without a
// worker row (it never heartbeated) gets one, not live, so that its
// partitions are found as stale once their leases end.
func (s *Store) Claim(ctx context.Context, owner string, ttl time.Duration, cands []Candidate) ([]Claimed, error) {
	if len(cands) == 0 {
		return nil, nil
	}
	leases := make([]partition.Lease, len(cands))
	owned := make(map[string]bool, len(cands))
	for i, c := range cands {
		leases[i] = partition.Lease{Key: c.Key, Version: c.Version}
		owned[c.Key] = c.Owned
	}
	keys, versions := split(leases)
	held, hargs := s.heldChange("+", "u", owner)
	events, eargs := s.events(`, e AS (
			INSERT INTO {{.Schema}}.events (task_kind, partition_key, kind, version, worker, prev_owner, prev_heartbeat_at, position)
			SELECT kind, partition_key, CASE WHEN prev_owner IS NULL THEN ? ELSE ? END, version, owner,
			       prev_owner, prev_heartbeat, position
			FROM u
		)`, partition.EventClaimed, partition.EventTakeover)
	rows, err := s.db.QueryContext(ctx, s.sql(`
		WITH c AS (
			SELECT t.kind, t.partition_key, t.owner AS prev_owner, t.heartbeat_at AS prev_heartbeat
			FROM {{.Schema}}.tasks t
			JOIN unnest(?::text[], ?::bigint[]) AS c(key, version)
			  ON t.kind = ? AND t.partition_key = c.key AND t.version = c.version
			WHERE t.available > t.position AND t.failed_at IS NULL AND t.lease_expires_at <= now()
			  AND `+notPausedT+`
			ORDER BY t.partition_key
			FOR UPDATE OF t SKIP LOCKED
		), u AS (
			UPDATE {{.Schema}}.tasks t
			SET version = t.version + 1, owner = ?, claimed_at = now(), heartbeat_at = now(),
			    lease_expires_at = now() + ?::interval, updated_at = now()
			FROM c
			WHERE t.kind = c.kind AND t.partition_key = c.partition_key
			RETURNING t.kind, t.partition_key, t.version, t.position, t.available, t.owner, c.prev_owner, c.prev_heartbeat
		)`+held+events+`
		SELECT partition_key, version, position, available, prev_heartbeat FROM u`),
		append(append([]any{pgdialect.Array(keys), pgdialect.Array(versions), s.kind, owner, interval(ttl)}, hargs...), eargs...)...)
	if err != nil {
		return nil, fmt.Errorf("claiming %d partitions: %w", len(cands), err)
	}
	defer rows.Close()
	var won []Claimed
	for rows.Next() {
		var c Claimed
		var prevBeat sql.NullTime
		if err := rows.Scan(&c.Key, &c.Version, &c.Position, &c.Available, &prevBeat); err != nil {
			return nil, fmt.Errorf("claiming partitions: %w", err)
		}
		c.PrevHeartbeat = prevBeat.Time
		// The version compare-and-set guarantees the row is exactly as the
		// candidate read saw it, owner included.
		c.Takeover = owned[c.Key]
		won = append(won, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claiming partitions: %w", err)
	}
	return won, nil
}

// HeartbeatBelow renews the worker row and the leases still held by
// owner with less than renewBelow left by the database clock, in one
// statement, extending each to now() + ttl. It returns the leases still
// held; a lease missing from the result is lost.
//
// A row another transaction has locked (a load adding work holds it until
// it commits) is skipped rather than waited for, so one busy row never
// fails the whole renewal; it is then retried on its own, waiting for its
// lock at most ttl/4 and half of what is left of ctx. If the lock is still
// held, the lease comes back with Locked set and the time it has left, to
// be renewed by a later heartbeat.
//
// A row of owner's that the heartbeat does not list and whose lease has
// ended (one the worker stopped renewing, or a claim it never learnt of)
// is handed back by the same statement: version bumped under FOR UPDATE
// SKIP LOCKED, claimable at once, waiting workers notified, "released"
// with reason "expired" in its history. Other workers find a stale row
// only once its owner is not live (see StaleCandidates), so this is how
// a live worker's lost lease becomes claimable.
//
// The leases with renewBelow or more left come back with Fresh
// set and the time they have left, checked but not rewritten. The worker's
// row is renewed every time. A lease's row is then rewritten about once
// every ttl − renewBelow instead of at every heartbeat: with renewBelow
// 8s, ttl 10s and a heartbeat every second, one beat in three. The caller
// must take a Fresh lease's local deadline from its Remaining, never from
// ttl.
func (s *Store) HeartbeatBelow(ctx context.Context, w Worker, ttl, renewBelow time.Duration, leases []partition.Lease) ([]leaseinfo.Renewal, error) {
	keys, versions := split(leases)
	num, err := s.versionNum(ctx)
	if err != nil {
		return nil, fmt.Errorf("renewing %d partitions: %w", len(leases), err)
	}
	q := heartbeatEventsSQL
	switch {
	case s.noEvents && num >= returningOldFrom:
		q = heartbeatSQL18
	case s.noEvents:
		q = heartbeatSQL
	case num >= returningOldFrom:
		q = heartbeatEventsSQL18
	}
	rows, err := s.query(ctx, q,
		keys, versions, w.InstanceID, w.Name, w.Hostname, w.PID, w.Mode, cmp.Or(w.Wake, notify.WakeListen), micros(ttl),
		micros(renewBelow), w.Wanted, s.kind, notify.Channel, notify.Payload(notify.Released, s.kind),
		notify.Payload(notify.Joined, s.kind))
	if err != nil {
		s.forgetVersionOn(err)
		return nil, fmt.Errorf("renewing %d partitions: %w", len(leases), err)
	}
	defer rows.Close()
	out := make([]leaseinfo.Renewal, 0, len(leases))
	for rows.Next() {
		var r leaseinfo.Renewal
		var micros int64
		if err := rows.Scan(&r.Key, &r.Version, &r.Available, &r.Position, &r.Fresh, &r.Locked, &micros, &r.Paused); err != nil {
			return nil, fmt.Errorf("renewing partitions: %w", err)
		}
		r.Remaining = time.Duration(micros) * time.Microsecond
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("renewing partitions: %w", err)
	}
	rows.Close()
	// Most locks a heartbeat meets are about to go: a batch of this worker
	// committing its checkpoint. Wait for those, one row at a time, as a
	// heartbeat that waited would have (up to ttl/4, within half of what
	// is left of ctx), so that a busy partition is not left unrenewed; only
	// a row still locked after that (a stalled load) stays skipped, and the
	// others are renewed already.
	for i := range out {
		if !out[i].Locked {
			continue
		}
		wait := ttl / 4
		if d, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(d)/2)
		}
		if wait < 5*time.Millisecond {
			break
		}
		if r, ok := s.renewWaiting(ctx, w.InstanceID, ttl, out[i].Lease, wait); ok {
			out[i] = r
		}
	}
	return out, nil
}

// renewWaiting renews one lease, waiting at most wait for its row lock. It
// reports false if the lock did not come, or on any error: the lease then
// stays as the heartbeat found it.
func (s *Store) renewWaiting(ctx context.Context, owner string, ttl time.Duration, l partition.Lease, wait time.Duration) (leaseinfo.Renewal, bool) {
	r := leaseinfo.Renewal{Lease: l}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return r, false
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `SELECT set_config('lock_timeout', ?, true)`, fmt.Sprint(wait.Milliseconds())); err != nil {
		return r, false
	}
	err = tx.QueryRowContext(ctx, s.sql(`
		UPDATE {{.Schema}}.tasks SET heartbeat_at = now(), lease_expires_at = now() + ?::interval
		WHERE kind = ? AND partition_key = ? AND version = ? AND `+ownedBy("owner", "?")+`
		RETURNING available, position`), interval(ttl), s.kind, l.Key, l.Version, owner).Scan(&r.Available, &r.Position)
	if err != nil || tx.Commit() != nil {
		return r, false
	}
	return r, true
}

// Inspect re-reads leases without changing them: it is how a heartbeat or
// commit whose outcome is unknown (the connection failed after sending) is
// resolved. Leases no longer held by owner are absent from the result.
func (s *Store) Inspect(ctx context.Context, owner string, leases []partition.Lease) ([]leaseinfo.Owned, error) {
	keys, versions := split(leases)
	rows, err := s.db.QueryContext(ctx, s.sql(`
		SELECT t.partition_key, t.version,
		       greatest(0, (extract(epoch FROM t.lease_expires_at - now()) * 1000000)::bigint)
		FROM {{.Schema}}.tasks t
		JOIN unnest(?::text[], ?::bigint[]) AS h(key, version)
		  ON t.kind = ? AND t.partition_key = h.key AND t.version = h.version
		WHERE `+ownedBy("t.owner", "?")),
		pgdialect.Array(keys), pgdialect.Array(versions), s.kind, owner)
	if err != nil {
		return nil, fmt.Errorf("re-reading %d leases: %w", len(leases), err)
	}
	defer rows.Close()
	var out []leaseinfo.Owned
	for rows.Next() {
		var h leaseinfo.Owned
		var micros int64
		if err := rows.Scan(&h.Key, &h.Version, &micros); err != nil {
			return nil, fmt.Errorf("re-reading leases: %w", err)
		}
		h.Remaining = time.Duration(micros) * time.Microsecond
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("re-reading leases: %w", err)
	}
	return out, nil
}

// heldChange is the CTE by which a claim (op "+") or a release ("-")
// changes its worker's held count and backlog (FairShareLoad) by the rows
// of CTE rows (which return position and available),
// so that the count follows them from their commit rather than from the
// worker's next heartbeat. Not inside a caller's transaction: that would
// keep the worker's row locked, and its heartbeat waiting, until the
// transaction ends; the next heartbeat counts those.
//
// A claim also registers an owner that has no worker row (one that never
// heartbeated), as not live, so that its partitions are found as stale
// once their leases end (StaleCandidates). Inside a transaction that
// insert does nothing to an existing row, and locks none.
func (s *Store) heldChange(op, rows, owner string) (string, []any) {
	_, inTx := s.db.(bun.Tx)
	switch {
	case op == "+" && inTx:
		return `, wh AS (
			INSERT INTO {{.Schema}}.workers (instance_id, name, kind, expires_at)
			SELECT ?, split_part(?, '#', 1), ?, now() WHERE EXISTS (SELECT 1 FROM ` + rows + `)
			ON CONFLICT (instance_id) DO NOTHING
		)`, []any{owner, owner, s.kind}
	case op == "+":
		return `, wh AS (
			INSERT INTO {{.Schema}}.workers (instance_id, name, kind, expires_at, held, backlog)
			SELECT ?, split_part(?, '#', 1), ?, now(), count(*), coalesce(sum(greatest(available - position, 0)), 0)
			FROM ` + rows + ` HAVING count(*) > 0
			ON CONFLICT (instance_id) DO UPDATE
			SET held = workers.held + EXCLUDED.held, backlog = workers.backlog + EXCLUDED.backlog
		)`, []any{owner, owner, s.kind}
	case inTx:
		return "", nil
	}
	return `, wh AS (
			UPDATE {{.Schema}}.workers
			SET held = greatest(0, held ` + op + ` (SELECT count(*) FROM ` + rows + `)),
			    backlog = greatest(0, backlog ` + op + ` (SELECT coalesce(sum(greatest(available - position, 0)), 0) FROM ` + rows + `))
			WHERE instance_id = ? AND EXISTS (SELECT 1 FROM ` + rows + `)
		)`, []any{owner}
}

// Release gives up leases held by owner, bumping their versions so that no
// write under the old claim can commit, and makes them claimable at once
// without confirmation. It wakes waiting workers. It returns the keys
// released.
func (s *Store) Release(ctx context.Context, owner string, leases []partition.Lease) ([]string, error) {
	return s.ReleaseFor(ctx, owner, "", leases)
}

// ReleaseFor is Release recording reason (caught_up, rebalance, shutdown)
// in the partitions' history.
func (s *Store) ReleaseFor(ctx context.Context, owner, reason string, leases []partition.Lease) ([]string, error) {
	if len(leases) == 0 {
		return nil, nil
	}
	keys, versions := split(leases)
	held, hargs := s.heldChange("-", "r", owner)
	events, eargs := s.events(`, e AS (
			INSERT INTO {{.Schema}}.events (task_kind, partition_key, kind, version, worker, position, detail)
			SELECT kind, partition_key, ?, version - 1, ?, position, nullif(?, '') FROM r
		)`, partition.EventReleased, owner, reason)
	// One statement: the notification (only when a released partition
	// still has pending work) is sent at the release's commit.
	rows, err := s.db.QueryContext(ctx, s.sql(`
		WITH l AS (`+lockOwnLeases("UPDATE", "")+`), r AS (
			UPDATE {{.Schema}}.tasks t
			SET version = t.version + 1, owner = NULL, heartbeat_at = NULL,
			    lease_expires_at = '-infinity', updated_at = now()
			FROM l
			WHERE t.kind = l.kind AND t.partition_key = l.partition_key
			RETURNING t.kind, t.partition_key, t.version, t.position, t.available, t.available > t.position AS pending
		), n AS (
			-- With the statement's time: the rows became claimable no
			-- earlier, however long the transaction takes to commit.
			SELECT count(pg_notify(?, ? || ' ' || (extract(epoch FROM statement_timestamp()) * 1000000)::bigint)) AS sent
			FROM (SELECT 1 FROM r WHERE pending LIMIT 1) p
		)`+held+events+`
		SELECT r.partition_key FROM r CROSS JOIN n`),
		append(append([]any{pgdialect.Array(keys), pgdialect.Array(versions), s.kind, owner, notify.Channel,
			notify.Payload(notify.Released, s.kind)}, hargs...), eargs...)...)
	if err != nil {
		return nil, fmt.Errorf("releasing %d partitions: %w", len(leases), err)
	}
	defer rows.Close()
	var released []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, fmt.Errorf("releasing partitions: %w", err)
		}
		released = append(released, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("releasing partitions: %w", err)
	}
	return released, nil
}

// Fence is InTx(tx, owner).Fence(ctx, l).
func (s *Store) Fence(ctx context.Context, tx bun.Tx, owner string, l partition.Lease) (partition.Checkpoint, error) {
	return s.InTx(tx, owner).Fence(ctx, l)
}

// Fence locks the task row of lease inside the transaction and returns its
// checkpoint, or ErrFenced if the lease is no longer the owner's. The row lock is held
// until tx ends, so no claim can change ownership between this check and
// the commit: the ownership check is part of the write.
//
// The lock is FOR KEY SHARE: it conflicts only with FOR UPDATE, which every
// ownership change (claim, release, failure) takes before bumping the
// version, while heartbeats (FOR NO KEY UPDATE) and the checkpoint update
// proceed. So a long batch does not delay its own lease renewals.
func (t Txn) Fence(ctx context.Context, l partition.Lease) (partition.Checkpoint, error) {
	var cp partition.Checkpoint
	var state []byte
	err := t.tx.QueryRowContext(ctx, t.s.sql(`
		SELECT position, available, checkpoint, coalesce(traceparent, ''), generation
		FROM {{.Schema}}.tasks
		WHERE kind = ? AND partition_key = ? AND version = ? AND `+ownedBy("owner", "?")+`
		FOR KEY SHARE`), t.s.kind, l.Key, l.Version, t.owner).Scan(&cp.Position, &cp.Available, &state, &cp.Traceparent, &cp.Generation)
	if errors.Is(err, sql.ErrNoRows) {
		return cp, fmt.Errorf("fencing %s: %w", l, partition.ErrFenced)
	}
	if err != nil {
		return cp, fmt.Errorf("fencing %s: %w", l, err)
	}
	cp.State = state
	return cp, nil
}

// Advance is InTx(tx, "").Advance(ctx, l, from, position, state).
func (s *Store) Advance(ctx context.Context, tx bun.Tx, l partition.Lease, from, position int64, state json.RawMessage) error {
	return s.InTx(tx, "").Advance(ctx, l, from, position, state)
}

// Advance records a new checkpoint inside the fenced transaction. It is a
// compare-and-set on both the version and the position the fence read
// (from), so a batch retried after a commit whose outcome was unknown can
// never commit the same items twice or move the checkpoint backwards.
// The trace context of the span in ctx, if any, is stored with the
// checkpoint (Checkpoint.Traceparent).
func (t Txn) Advance(ctx context.Context, l partition.Lease, from, position int64, state json.RawMessage) error {
	if state == nil {
		state = json.RawMessage(`{}`)
	}
	var version, current int64
	err := t.tx.QueryRowContext(ctx, t.s.sql(`
		WITH u AS (
			UPDATE {{.Schema}}.tasks
			SET position = ?, checkpoint = ?::jsonb, attempts = 0, last_error = NULL, updated_at = now(),
			    traceparent = nullif(?, '')
			WHERE kind = ? AND partition_key = ? AND version = ? AND position = ?
			RETURNING 1
		)
		SELECT version, position FROM {{.Schema}}.tasks
		WHERE kind = ? AND partition_key = ? AND NOT EXISTS (SELECT 1 FROM u)`),
		position, string(state), traceparent(ctx), t.s.kind, l.Key, l.Version, from, t.s.kind, l.Key).Scan(&version, &current)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil // updated
	case err != nil:
		return fmt.Errorf("advancing checkpoint of %s to %d: %w", l, position, err)
	case version == l.Version:
		return fmt.Errorf("advancing checkpoint of %s from %d: it is at %d: %w", l, from, current, partition.ErrCheckpointMoved)
	default:
		return fmt.Errorf("advancing checkpoint of %s: %w", l, partition.ErrFenced)
	}
}

// FailResult says what a recorded failure did.
type FailResult struct {
	Attempts    int           // failed attempts, this one included
	Quarantined bool          // MaxAttempts reached: no retry until Retry
	RetryAfter  time.Duration // back-off before the partition is claimable again
}

// Fail records a processing failure under lease and releases the partition:
// it becomes claimable again after an exponential back-off
// (backoff × 2^(attempts−1), at most maxBackoff), or, once attempts reaches
// maxAttempts, is quarantined until Retry.
func (s *Store) Fail(ctx context.Context, owner string, l partition.Lease, cause string, backoff, maxBackoff time.Duration, maxAttempts int) (FailResult, error) {
	var r FailResult
	var retryMicros int64
	events, eargs := s.events(`, e AS (
			INSERT INTO {{.Schema}}.events (task_kind, partition_key, kind, version, worker, attempts, detail)
			SELECT kind, partition_key, CASE WHEN quarantine THEN ? ELSE ? END, ?, ?, attempts, last_error FROM u
		)`, partition.EventQuarantined, partition.EventFailed, l.Version, owner)
	err := s.db.QueryRowContext(ctx, s.sql(`
		WITH b AS (
			-- In numeric: backoff × 2^attempts overflows bigint with long
			-- back-offs; the result is capped by maxBackoff, a bigint.
			SELECT least(?::numeric * power(2::numeric, least(attempts, 62)), ?::numeric)::bigint AS micros,
			       attempts + 1 >= ? AS quarantine
			FROM {{.Schema}}.tasks WHERE kind = ? AND partition_key = ? AND version = ? AND `+ownedBy("owner", "?")+`
			FOR UPDATE
		), u AS (
			UPDATE {{.Schema}}.tasks t
			SET attempts = t.attempts + 1, last_error = ?, version = t.version + 1, owner = NULL,
			    heartbeat_at = NULL, updated_at = now(),
			    failed_at = CASE WHEN b.quarantine THEN now() END,
			    lease_expires_at = CASE WHEN b.quarantine THEN 'infinity'::timestamptz
			                            ELSE now() + b.micros * interval '1 microsecond' END
			FROM b
			WHERE t.kind = ? AND t.partition_key = ?
			RETURNING t.kind, t.partition_key, t.attempts, t.last_error, b.quarantine, b.micros
		)`+events+`
		SELECT attempts, quarantine, micros FROM u`),
		append([]any{backoff.Microseconds(), maxBackoff.Microseconds(), maxAttempts, s.kind, l.Key, l.Version, owner,
			truncate(cause, 4000), s.kind, l.Key}, eargs...)...).Scan(&r.Attempts, &r.Quarantined, &retryMicros)
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("recording failure of %s: %w", l, partition.ErrFenced)
	}
	if err != nil {
		return r, fmt.Errorf("recording failure of %s: %w", l, err)
	}
	if !r.Quarantined {
		r.RetryAfter = time.Duration(retryMicros) * time.Microsecond
	}
	return r, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Load is the cluster-wide picture a worker uses for its fair share and to
// know when all work is done.
type Load struct {
	// Busy counts partitions that are pending or held under a live lease,
	// excluding quarantined ones.
	Busy int
	// LiveWorkers counts worker instances whose heartbeat has not expired.
	LiveWorkers int
	// Quarantined counts partitions marked failed; FairShareLoad leaves
	// it 0 (see QuarantinedCount).
	Quarantined int
	// Unclaimed counts partitions with pending work that could be claimed
	// right now.
	Unclaimed int
	// MinHeld is the fewest partitions any live worker holds.
	MinHeld int
	// Wanted is how many more partitions the other live workers want, as
	// their last heartbeats said (Worker.Wanted); FairShareLoad only.
	Wanted int
	// Backlog is the pending work items (available − position) of the
	// partitions Busy counts: those the live workers hold (as their last
	// heartbeats, claims and releases wrote them), the leaving workers'
	// leases and the claimable rows counted. Past the claimable count's
	// cap it is a lower bound. FairShareLoad only.
	Backlog int64
	// SelfBacklog is the pending work items of the partitions the reading
	// worker holds, as its last heartbeat, claims and releases wrote them.
	// FairShareLoad only.
	SelfBacklog int64
}

// FairShareLoad reads what worker self, with room for maxPartitions, needs for
// its fair share among the workers of s's kind, counting only that kind's
// workers and partitions, bounded by what can change that share rather than by the
// number of partitions or workers, so that its cost does not grow with
// either table:
//
//   - LiveWorkers, and the partitions they hold (summed, and MinHeld, the
//     fewest), come from the workers table: each heartbeat writes how many
//     leases it renewed (workers.held), so nothing counts leases in tasks.
//     A claim made since a worker's last heartbeat is counted from its next;
//   - Busy is those held partitions, plus the leases of workers that
//     stopped within the last staleAfter (the lease length) and have not
//     released them yet, plus the claimable ones (pending, not
//     quarantined, unowned or past their lease), counted from the head of
//     the tasks_claimable index only up to LiveWorkers × maxPartitions
//     (beyond that every worker's share is maxPartitions anyway). Partitions
//     waiting out a failure's back-off are not counted until claimable,
//     except that Busy is never 0 while any partition has pending work;
//   - Unclaimed is the claimable count, capped at maxPartitions + 1 (it is
//     compared with 0 and with a count of held partitions);
//   - the claimable rows are read from s's floor (see FloorMargin), as
//     Candidates reads them, and move it as Candidates does (this read
//     is a full one when a full-read period is up): a partition made
//     claimable by a transaction that committed long after (and that no
//     notification announced) is counted once a full read, of either,
//     has found it. PendingWork answers exactly;
//   - Wanted sums what the live workers other than self want (their
//     heartbeats write Worker.Wanted);
//   - Backlog sums the pending items of what Busy counts: the live
//     workers' held backlogs (workers.backlog, written as held is), the
//     leaving workers' leases and the claimable rows read (a lower bound
//     once those reach the cap); SelfBacklog is self's held backlog;
//   - Quarantined is not counted (0): no index answers it, and only the
//     end of an until-done run needs it (QuarantinedCount).
//
// Zero stays exact for Busy and Unclaimed, which is what deciding that all
// work is done needs.
func (s *Store) FairShareLoad(ctx context.Context, self string, maxPartitions int, staleAfter time.Duration) (Load, error) {
	var l Load
	read := s.floor.begin()
	rows, err := s.query(ctx, fairShareSQL, maxPartitions, micros(staleAfter), self, s.kind, read.arg)
	if err != nil {
		return l, fmt.Errorf("reading cluster load: %w", err)
	}
	defer rows.Close()
	if !rows.Next() {
		return l, fmt.Errorf("reading cluster load: %w", cmp.Or(rows.Err(), sql.ErrNoRows))
	}
	var (
		earliest sql.NullFloat64
		now      float64
		complete bool
	)
	if err := rows.Scan(&l.Busy, &l.LiveWorkers, &l.Unclaimed, &l.MinHeld, &l.Wanted, &l.Backlog, &l.SelfBacklog,
		&earliest, &now, &complete); err != nil {
		return l, fmt.Errorf("reading cluster load: %w", err)
	}
	if err := rows.Close(); err != nil {
		return l, fmt.Errorf("reading cluster load: %w", err)
	}
	if !earliest.Valid {
		earliest.Float64 = math.NaN()
	}
	s.floor.saw(read, earliest.Float64, now, complete)
	return l, nil
}

// QuarantinedCount counts the partitions of s's kind marked failed. It
// reads the whole table: call it rarely (the end of an until-done run).
func (s *Store) QuarantinedCount(ctx context.Context) (int, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, s.sql(`SELECT count(*) FROM {{.Schema}}.tasks WHERE kind = ? AND failed_at IS NOT NULL`), s.kind).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting quarantined partitions: %w", err)
	}
	return n, nil
}

// StopWorker marks a worker instance stopped, so others stop counting it at
// once, and forgets instances that have been dead for over a day. The mark
// notifies (NotifyLeft) at its commit: the others recompute their shares
// before the stopping worker's releases reach them.
func (s *Store) StopWorker(ctx context.Context, instanceID string) error {
	if _, err := s.db.ExecContext(ctx, s.sql(`
		WITH u AS (
			UPDATE {{.Schema}}.workers SET stopped_at = now(), expires_at = now() WHERE instance_id = ?
			RETURNING 1
		)
		SELECT pg_notify(?, ?) FROM u`), instanceID, notify.Channel, notify.Payload(notify.Left, s.kind)); err != nil {
		return fmt.Errorf("marking worker %s stopped: %w", instanceID, err)
	}
	// A dead worker's row stays while it owns task rows: they are found
	// through it (StaleCandidates).
	if _, err := s.db.ExecContext(ctx, s.sql(`
		DELETE FROM {{.Schema}}.workers w WHERE expires_at < now() - interval '1 day'
		  AND NOT EXISTS (SELECT 1 FROM {{.Schema}}.tasks t WHERE t.owner = w.instance_id)`)); err != nil {
		return fmt.Errorf("forgetting dead workers: %w", err)
	}
	return nil
}

// Notify wakes the workers of s's kind waiting for claimable work, telling
// them reason. Inside a transaction the notification is delivered at
// commit.
func (s *Store) Notify(ctx context.Context, reason string) error {
	if _, err := s.db.ExecContext(ctx, `SELECT pg_notify(?, ?)`, notify.Channel, notify.Payload(reason, s.kind)); err != nil {
		return fmt.Errorf("notifying workers: %w", err)
	}
	return nil
}

// Admin is the producers' and operators' Store over the same database,
// schema and kind as s: AddWork, Status, Progress, History, Retry.
func (s *Store) Admin() *partition.Store {
	db, ok := s.db.(*dbconn.DB)
	if !ok {
		// A plain handle (tests'): described as pooled, which is never
		// checked, so wrapping it cannot fail.
		db, _ = dbconn.Wrap(context.Background(), s.db.(*bun.DB), dbconn.Access{Pooled: true})
	}
	return partition.NewStore(db, s.schema).Kind(s.kind)
}
