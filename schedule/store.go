package schedule

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/schema"
)

func micros(d time.Duration) int64 { return d.Microseconds() }

func interval(d time.Duration) string { return fmt.Sprintf("%d microseconds", d.Microseconds()) }

// Store is the operators' view of the jobs table, bound once to a
// database handle and a schema: it adds, lists, removes and triggers jobs.
// The statements that claim, fence and complete runs are the Scheduler's.
type Store struct {
	db     *dbconn.DB
	schema string
}

// NewStore returns a Store over db for the jobs in PostgreSQL schema
// schemaName (schema.Default, "baton", when empty).
func NewStore(db *dbconn.DB, schemaName string) *Store {
	return &Store{db: db, schema: cmp.Or(schemaName, schema.Default)}
}

// Add stores d, or updates the stored job of that name. A changed schedule
// restarts the job's slots from the next one after now (database clock); a
// job that is running keeps running under its old definition until it
// completes.
func (st *Store) Add(ctx context.Context, d Definition) error {
	db, schemaName := st.db, st.schema
	d.setDefaults()
	if err := d.Validate(); err != nil {
		return err
	}
	s, err := d.slots()
	if err != nil {
		return err
	}
	return runInTx(ctx, db, func(tx bun.Tx) error {
		var now time.Time
		if err := tx.QueryRowContext(ctx, `SELECT now()`).Scan(&now); err != nil {
			return err
		}
		var every sql.NullInt64
		if d.Every > 0 {
			every = sql.NullInt64{Int64: micros(d.Every), Valid: true}
		}
		var cronExpr, builtin sql.NullString
		if d.Cron != "" {
			cronExpr = sql.NullString{String: d.Cron, Valid: true}
		}
		if d.Builtin != "" {
			builtin = sql.NullString{String: d.Builtin, Valid: true}
		}
		var command any
		if len(d.Command) > 0 {
			command = pgdialect.Array(d.Command)
		}
		_, err := tx.ExecContext(ctx, schema.SQL(schemaName, `
			INSERT INTO {{.Schema}}.jobs AS j (name, every_us, cron, mode, missed, lock_at_most_for_us, lock_at_least_for_us,
			                       command, builtin, next_run)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?::text[], ?, ?)
			ON CONFLICT (name) DO UPDATE
			SET every_us = EXCLUDED.every_us, cron = EXCLUDED.cron, mode = EXCLUDED.mode,
			    missed = EXCLUDED.missed, lock_at_most_for_us = EXCLUDED.lock_at_most_for_us,
			    lock_at_least_for_us = EXCLUDED.lock_at_least_for_us, command = EXCLUDED.command,
			    builtin = EXCLUDED.builtin, updated_at = now(),
			    next_run = CASE WHEN j.every_us IS NOT DISTINCT FROM EXCLUDED.every_us
			                     AND j.cron IS NOT DISTINCT FROM EXCLUDED.cron
			                    THEN j.next_run ELSE EXCLUDED.next_run END`),
			d.Name, every, cronExpr, string(d.Mode), string(d.Missed), micros(d.LockAtMostFor),
			micros(d.LockAtLeastFor), command, builtin, s.Next(now))
		if err != nil {
			return fmt.Errorf("storing job %s: %w", d.Name, err)
		}
		return nil
	})
}

// Remove deletes a job. A run in progress is fenced: its completion finds
// no row.
func (st *Store) Remove(ctx context.Context, name string) error {
	db, schemaName := st.db, st.schema
	res, err := db.ExecContext(ctx, schema.SQL(schemaName, `DELETE FROM {{.Schema}}.jobs WHERE name = ?`), name)
	if err != nil {
		return fmt.Errorf("removing job %s: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("removing job %s: %w", name, partition.ErrNotFound)
	}
	return nil
}

// Trigger asks for one extra run of a job now (database clock), beside its
// schedule. Its slot is the time of the request.
func (st *Store) Trigger(ctx context.Context, name string) (time.Time, error) {
	db, schemaName := st.db, st.schema
	var at time.Time
	err := db.QueryRowContext(ctx, schema.SQL(schemaName, `
		UPDATE {{.Schema}}.jobs SET trigger_at = coalesce(trigger_at, now()), updated_at = now()
		WHERE name = ? RETURNING trigger_at`), name).Scan(&at)
	if errors.Is(err, sql.ErrNoRows) {
		return at, fmt.Errorf("triggering job %s: %w", name, partition.ErrNotFound)
	}
	if err != nil {
		return at, fmt.Errorf("triggering job %s: %w", name, err)
	}
	return at.UTC(), nil
}

// Status is a job as shown by "worker schedule list".
type Status struct {
	Name            string     `json:"name"`
	State           string     `json:"state"`
	Owner           string     `json:"owner"`
	Mode            string     `json:"mode"`
	Missed          string     `json:"missed"`
	Schedule        string     `json:"schedule"`
	Command         []string   `json:"command,omitempty"`
	Builtin         string     `json:"builtin,omitempty"`
	Fence           int64      `json:"fence"`
	NextRun         time.Time  `json:"next_run"`
	LastSlot        *time.Time `json:"last_slot"`
	LastRunStarted  *time.Time `json:"last_run_started"`
	LastRunFinished *time.Time `json:"last_run_finished"`
	LastResult      string     `json:"last_result"`
	LastError       string     `json:"last_error"`
	Runs            int64      `json:"runs"`
}

// List returns every job, by name. Owner is empty when no live lease holds
// the job (a lease that ran out names nobody).
func (st *Store) List(ctx context.Context) ([]Status, error) {
	db, schemaName := st.db, st.schema
	rows, err := db.QueryContext(ctx, schema.SQL(schemaName, `
		SELECT name, state, CASE WHEN lease_expires_at > now() THEN coalesce(owner, '') ELSE '' END,
		       mode, missed, every_us, cron, command, coalesce(builtin, ''), version, next_run,
		       last_slot, last_run_started, last_run_finished, coalesce(last_result, ''),
		       coalesce(last_error, ''), runs
		FROM {{.Schema}}.jobs ORDER BY name`))
	if err != nil {
		return nil, fmt.Errorf("listing jobs: %w", err)
	}
	defer rows.Close()
	var out []Status
	for rows.Next() {
		var s Status
		var every sql.NullInt64
		var cronExpr sql.NullString
		var slot, started, finished sql.NullTime
		if err := rows.Scan(&s.Name, &s.State, &s.Owner, &s.Mode, &s.Missed, &every, &cronExpr,
			pgdialect.Array(&s.Command), &s.Builtin, &s.Fence, &s.NextRun, &slot, &started, &finished,
			&s.LastResult, &s.LastError, &s.Runs); err != nil {
			return nil, fmt.Errorf("listing jobs: %w", err)
		}
		d := Definition{Every: time.Duration(every.Int64) * time.Microsecond, Cron: cronExpr.String}
		s.Schedule = d.ScheduleString()
		s.NextRun = s.NextRun.UTC()
		s.LastSlot, s.LastRunStarted, s.LastRunFinished = utcPtr(slot), utcPtr(started), utcPtr(finished)
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing jobs: %w", err)
	}
	return out, nil
}

func utcPtr(t sql.NullTime) *time.Time {
	if !t.Valid {
		return nil
	}
	u := t.Time.UTC()
	return &u
}

// runInTx runs fn in a transaction on db. On a *dbconn.DB the transaction
// carries the handle's statement, lock and idle-in-transaction limits,
// through a transaction pooler too (set with its BEGIN, or by SET LOCAL on
// a wrapped handle), so a worker stalled between a claim's statements
// cannot keep a job's row locked.
func runInTx(ctx context.Context, db bun.IDB, fn func(tx bun.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("beginning transaction: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing: %w", err)
	}
	return nil
}

// runStore runs the scheduler's protocol statements for one owner.
type runStore struct {
	db     bun.IDB
	schema string
	owner  string
	ttl    time.Duration
}

// claimable is the condition under which owner may start a run of a job
// now: nobody else holds a live lease (or owner holds it idle, in leader
// mode), a slot or a trigger is due (or an abandoned run waits to be run
// again), and lock-at-least-for has passed since the last start.
const claimable = `
	(j.lease_expires_at <= now() OR (j.owner = ?0 AND j.state = 'idle'))
	AND (j.state = 'running' OR j.next_run <= now() OR j.trigger_at IS NOT NULL)
	AND (j.state = 'running' OR j.last_run_started IS NULL
	     OR j.last_run_started + j.lock_at_least_for_us * interval '1 microsecond' <= now())`

type candidate struct {
	name    string
	version int64
}

// candidates returns the jobs owner could start now, among names (all
// when names is nil), and how long until the next slot of any job
// (database clock; negative when none).
func (s *runStore) candidates(ctx context.Context, names []string) ([]candidate, time.Duration, error) {
	args := []any{s.owner, names == nil, pgdialect.Array(names)}
	rows, err := s.db.QueryContext(ctx, s.sql(`
		SELECT j.name, j.version FROM {{.Schema}}.jobs j
		WHERE `+claimable+` AND (?1 OR j.name = ANY(?2::text[]))
		ORDER BY j.name`), args...)
	if err != nil {
		return nil, 0, fmt.Errorf("reading due jobs: %w", err)
	}
	defer rows.Close()
	var out []candidate
	for rows.Next() {
		var c candidate
		if err := rows.Scan(&c.name, &c.version); err != nil {
			return nil, 0, fmt.Errorf("reading due jobs: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("reading due jobs: %w", err)
	}
	var us sql.NullInt64
	if err := s.db.QueryRowContext(ctx, s.sql(`
		SELECT (extract(epoch FROM min(greatest(j.next_run,
		          j.last_run_started + j.lock_at_least_for_us * interval '1 microsecond',
		          CASE WHEN j.owner = ?0 AND j.state = 'idle' THEN '-infinity' ELSE j.lease_expires_at END))
		        - now()) * 1000000)::bigint
		FROM {{.Schema}}.jobs j WHERE (?1 OR j.name = ANY(?2::text[]))`), args...).Scan(&us); err != nil {
		return nil, 0, fmt.Errorf("reading next due time: %w", err)
	}
	next := time.Duration(-1)
	if us.Valid {
		next = max(0, time.Duration(us.Int64)*time.Microsecond)
	}
	return out, next, nil
}

// claimed is a run won by claim.
type claimed struct {
	def       Definition
	version   int64
	slot      time.Time
	triggered bool
	// takeover is true when a run of another owner, abandoned when its
	// lease ran out, is run again: the old runner may still be alive.
	takeover bool
	// remaining is the time left to the run's deadline (database clock).
	remaining time.Duration
}

// claim starts a run of job c if it is still as read and claimable: in
// one transaction it locks the row, computes the slot from the database's
// now(), and sets the job running under owner with a lease of ttl. The
// version (the fencing token) is bumped unless owner already held the job.
// It returns nil when someone else got there first.
func (s *runStore) claim(ctx context.Context, c candidate) (*claimed, error) {
	var out *claimed
	err := runInTx(ctx, s.db, func(tx bun.Tx) error {
		var (
			d                    Definition
			every                sql.NullInt64
			cronExpr, owner      sql.NullString
			state                string
			mostUS, leastUS      int64
			nextRun, now         time.Time
			triggerAt, runSlot   sql.NullTime
			runTriggered, leased bool
		)
		err := tx.QueryRowContext(ctx, s.sql(`
			SELECT j.name, j.every_us, j.cron, j.mode, j.missed, j.lock_at_most_for_us, j.lock_at_least_for_us,
			       j.command, coalesce(j.builtin, ''), j.owner, j.state, j.next_run, j.trigger_at,
			       j.running_slot, j.running_triggered, j.lease_expires_at > now(), now()
			FROM {{.Schema}}.jobs j
			WHERE j.name = ?1 AND j.version = ?2 AND `+claimable+`
			FOR UPDATE SKIP LOCKED`),
			s.owner, c.name, c.version).Scan(
			&d.Name, &every, &cronExpr, &d.Mode, &d.Missed, &mostUS, &leastUS,
			pgdialect.Array(&d.Command), &d.Builtin, &owner, &state, &nextRun, &triggerAt,
			&runSlot, &runTriggered, &leased, &now)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("claiming job %s: %w", c.name, err)
		}
		d.Every = time.Duration(every.Int64) * time.Microsecond
		d.Cron = cronExpr.String
		d.LockAtMostFor = time.Duration(mostUS) * time.Microsecond
		d.LockAtLeastFor = time.Duration(leastUS) * time.Microsecond
		sched, err := d.slots()
		if err != nil {
			return err
		}
		cl := &claimed{def: d}
		switch {
		case state == "running":
			// Abandoned run (its lease ran out, or its worker stopped
			// before completing): run the same slot again.
			cl.slot, cl.triggered = runSlot.Time, runTriggered
			cl.takeover = owner.Valid && owner.String != s.owner
		case !nextRun.After(now):
			cl.slot = nextRun
			if d.Missed == MissedSkip {
				cl.slot = latestDue(sched, nextRun, now)
			}
		default:
			cl.slot, cl.triggered = triggerAt.Time, true
		}
		// Keeping the version when owner already holds the job (leader
		// mode) keeps its heartbeat lease; the run is still fenced by
		// (version, owner, slot).
		keep := leased && owner.String == s.owner
		err = tx.QueryRowContext(ctx, s.sql(`
			UPDATE {{.Schema}}.jobs
			SET version = version + CASE WHEN ? THEN 0 ELSE 1 END, owner = ?, heartbeat_at = now(),
			    lease_expires_at = now() + ?::interval, state = 'running', running_slot = ?,
			    running_triggered = ?, run_deadline = now() + lock_at_most_for_us * interval '1 microsecond',
			    last_run_started = now(), updated_at = now()
			WHERE name = ?
			RETURNING version, (extract(epoch FROM run_deadline - now()) * 1000000)::bigint`),
			keep, s.owner, interval(s.ttl), cl.slot, cl.triggered, c.name).Scan(&cl.version, &mostUS)
		if err != nil {
			return fmt.Errorf("claiming job %s: %w", c.name, err)
		}
		cl.slot = cl.slot.UTC()
		cl.remaining = time.Duration(mostUS) * time.Microsecond
		out = cl
		return nil
	})
	return out, err
}

// fence locks the job row inside tx where run r still holds it, FOR KEY
// SHARE: it conflicts with every change of ownership (claims lock FOR
// UPDATE) but not with heartbeats, so a long write does not delay its own
// lease renewals. The lease is compared with clock_timestamp(), the time
// the row is read (and read again after a wait for its lock), not with
// now(), the start of a transaction that may have begun before the lease
// ran out.
func (s *runStore) fence(ctx context.Context, tx bun.IDB, name string, version int64, slot time.Time) error {
	var one int
	err := tx.QueryRowContext(ctx, s.sql(`
		SELECT 1 FROM {{.Schema}}.jobs
		WHERE name = ? AND version = ? AND owner = ? AND state = 'running' AND running_slot = ?
		  AND lease_expires_at > clock_timestamp()
		FOR KEY SHARE`), name, version, s.owner, slot).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("job %s slot %s fence %d: %w", name, slot.Format(time.RFC3339Nano), version, partition.ErrFenced)
	}
	if err != nil {
		return fmt.Errorf("fencing job %s: %w", name, err)
	}
	return nil
}

// complete records a run's outcome, fenced on (version, owner, slot): the
// job goes idle, next_run moves past the slot (unless it was a triggered
// run), and in lock mode the job is released (version bumped, claimable at
// once by anyone after lock-at-least-for).
func (s *runStore) complete(ctx context.Context, name string, version int64, slot, next time.Time, result, errText string) error {
	var errVal sql.NullString
	if errText != "" {
		errVal = sql.NullString{String: truncate(errText, 4000), Valid: true}
	}
	res, err := s.db.ExecContext(ctx, s.sql(`
		UPDATE {{.Schema}}.jobs
		SET state = 'idle', last_slot = running_slot, last_run_finished = now(), last_result = ?,
		    last_error = ?, runs = runs + 1,
		    next_run = CASE WHEN running_triggered THEN next_run ELSE greatest(next_run, ?) END,
		    trigger_at = CASE WHEN running_triggered AND trigger_at = running_slot THEN NULL ELSE trigger_at END,
		    running_slot = NULL, running_triggered = false, run_deadline = NULL,
		    version = version + CASE WHEN mode = 'lock' THEN 1 ELSE 0 END,
		    owner = CASE WHEN mode = 'lock' THEN NULL ELSE owner END,
		    lease_expires_at = CASE WHEN mode = 'lock' THEN '-infinity' ELSE lease_expires_at END,
		    updated_at = now()
		WHERE name = ? AND version = ? AND owner = ? AND state = 'running' AND running_slot = ?`),
		result, errVal, next, name, version, s.owner, slot)
	if err != nil {
		return fmt.Errorf("recording run of job %s: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("recording run of job %s slot %s: %w", name, slot.Format(time.RFC3339Nano), partition.ErrFenced)
	}
	return nil
}

// release hands back a job held by owner without completing a run: a run
// in progress stays recorded as running, so whoever claims the job next
// runs its slot again, at once and without waiting for confirmation (the
// version is bumped, so nothing of the old run can commit).
func (s *runStore) release(ctx context.Context, name string, version int64) error {
	_, err := s.db.ExecContext(ctx, s.sql(`
		UPDATE {{.Schema}}.jobs
		SET version = version + 1, owner = NULL, heartbeat_at = NULL, lease_expires_at = '-infinity',
		    updated_at = now()
		WHERE name = ? AND version = ? AND owner = ?`), name, version, s.owner)
	if err != nil {
		return fmt.Errorf("releasing job %s: %w", name, err)
	}
	return nil
}

// sql qualifies q's table names with the store's schema.
func (s *runStore) sql(q string) string { return schema.SQL(s.schema, q) }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// definitions reads stored job definitions: the one named, or all when
// name is empty.
func definitions(ctx context.Context, db bun.IDB, schemaName string, name string) ([]Definition, error) {
	rows, err := db.QueryContext(ctx, schema.SQL(schemaName, `
		SELECT name, every_us, cron, mode, missed, lock_at_most_for_us, lock_at_least_for_us,
		       command, coalesce(builtin, '')
		FROM {{.Schema}}.jobs WHERE ? = '' OR name = ? ORDER BY name`), name, name)
	if err != nil {
		return nil, fmt.Errorf("reading job definitions: %w", err)
	}
	defer rows.Close()
	var out []Definition
	for rows.Next() {
		var d Definition
		var every sql.NullInt64
		var cronExpr sql.NullString
		var mostUS, leastUS int64
		if err := rows.Scan(&d.Name, &every, &cronExpr, &d.Mode, &d.Missed, &mostUS, &leastUS,
			pgdialect.Array(&d.Command), &d.Builtin); err != nil {
			return nil, fmt.Errorf("reading job definitions: %w", err)
		}
		d.Every = time.Duration(every.Int64) * time.Microsecond
		d.Cron = cronExpr.String
		d.LockAtMostFor = time.Duration(mostUS) * time.Microsecond
		d.LockAtLeastFor = time.Duration(leastUS) * time.Microsecond
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading job definitions: %w", err)
	}
	return out, nil
}
