package partition

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/batonhq/baton/internal/notify"
)

// Pausing.
//
// An operator pauses a whole kind or named partitions of it: a paused
// partition (with its segments), or any partition of a paused kind, is
// never claimed, and a worker that owns one releases it at its next batch
// boundary, within one heartbeat: the batch in flight commits or rolls
// back whole, so nothing is lost and order is kept. A pause is a row of
// its own (the pauses table), not a mark on task rows: a kind's pause
// covers partitions created after it, and a partition may be paused before
// its first work arrives. Work is still accepted while paused (AddWork,
// loads, rewinds) and waits. Resume makes the rows claimable at once and
// wakes the workers. Pauses and resumes are in the partitions' history
// (EventPaused, EventResumed; a kind's under the key "").

// Pause is one pause in force: of the partition Key, or of the whole kind
// when Key is "".
type Pause struct {
	Kind   string    `json:"kind"`
	Key    string    `json:"key"`    // the partition; "" for the whole kind
	Since  time.Time `json:"since"`  // when it was paused, by the database's clock
	By     string    `json:"by"`     // who paused it
	Reason string    `json:"reason"` // why
}

// Pause pauses the partitions keys of s's kind, or the whole kind when
// keys is empty, recording by (who) and reason in the pause and in the
// history. A partition need not exist yet. Pausing what is paused already
// changes nothing: the first pause, its time, author and reason, stays. It
// returns the pauses it made.
func (s *Store) Pause(ctx context.Context, by, reason string, keys ...string) ([]Pause, error) {
	return inTx(ctx, s.db, func(ctx context.Context, tx bun.Tx) ([]Pause, error) {
		return s.PauseTx(ctx, tx, by, reason, keys...)
	})
}

// PauseTx is Pause in the caller's transaction: the pause takes effect,
// and is recorded, if and only if tx commits.
func (s *Store) PauseTx(ctx context.Context, tx bun.Tx, by, reason string, keys ...string) ([]Pause, error) {
	if err := checkPauseKeys(keys); err != nil {
		return nil, err
	}
	rows, err := tx.QueryContext(ctx, s.sql(`
		WITH i AS (
			INSERT INTO {{.Schema}}.pauses (kind, partition_key, paused_by, reason)
			SELECT ?, k, ?, ? FROM unnest(?::text[]) AS k
			ORDER BY k
			ON CONFLICT DO NOTHING
			RETURNING kind, partition_key, paused_at, paused_by, reason
		), e AS (
			INSERT INTO {{.Schema}}.events (task_kind, partition_key, kind, version, worker, detail)
			SELECT i.kind, i.partition_key, ?, coalesce(t.version, 0), nullif(i.paused_by, ''), nullif(i.reason, '')
			  FROM i LEFT JOIN {{.Schema}}.tasks t ON t.kind = i.kind AND t.partition_key = i.partition_key
		)
		SELECT kind, partition_key, paused_at, paused_by, reason FROM i ORDER BY partition_key`),
		s.kind, by, reason, pgdialect.Array(pauseKeys(keys)), EventPaused)
	if err != nil {
		return nil, fmt.Errorf("pausing %s: %w", s.pauseTarget(keys), err)
	}
	return scanPauses(rows, "pausing "+s.pauseTarget(keys))
}

// Resume lifts the pauses of partitions keys of s's kind, or the kind's
// own pause when keys is empty (partitions paused by name stay paused),
// recording by in the history, and wakes the kind's workers: the rows are
// claimable at once, in their places in line. A partition of a paused kind
// stays paused until the kind is resumed. It returns the pauses lifted.
func (s *Store) Resume(ctx context.Context, by string, keys ...string) ([]Pause, error) {
	return inTx(ctx, s.db, func(ctx context.Context, tx bun.Tx) ([]Pause, error) {
		return s.ResumeTx(ctx, tx, by, keys...)
	})
}

// ResumeTx is Resume in the caller's transaction; the workers are woken
// when tx commits.
func (s *Store) ResumeTx(ctx context.Context, tx bun.Tx, by string, keys ...string) ([]Pause, error) {
	if err := checkPauseKeys(keys); err != nil {
		return nil, err
	}
	ks := pauseKeys(keys)
	// The notification carries the earliest claimable_at of the rows
	// resumed (they kept their places in tasks_claimable while paused,
	// below the floors the workers read from since), or the statement's
	// time when none is claimable: a worker that hears it reads the
	// claimable rows from there (notify.Since).
	rows, err := tx.QueryContext(ctx, s.sql(`
		WITH d AS (
			DELETE FROM {{.Schema}}.pauses
			 WHERE kind = ? AND partition_key = ANY (?::text[])
			RETURNING kind, partition_key, paused_at, paused_by, reason
		), e AS (
			INSERT INTO {{.Schema}}.events (task_kind, partition_key, kind, version, worker)
			SELECT d.kind, d.partition_key, ?, coalesce(t.version, 0), nullif(?, '')
			  FROM d LEFT JOIN {{.Schema}}.tasks t ON t.kind = d.kind AND t.partition_key = d.partition_key
		), since AS (
			SELECT least(statement_timestamp(), (
				-- (A row made claimable by hand at '-infinity' counts
				-- as the epoch: a time the notification can carry.)
				SELECT min(greatest(t.claimable_at, 'epoch'::timestamptz)) FROM {{.Schema}}.tasks t
				 WHERE t.kind = ? AND t.claimable_at IS NOT NULL
				   AND ('' = ANY (?::text[]) OR t.partition_key = ANY (?::text[]) OR t.segment_of = ANY (?::text[])))) AS at
		), n AS (
			SELECT pg_notify(?, ? || ' ' || (extract(epoch FROM since.at) * 1000000)::bigint)
			  FROM since WHERE EXISTS (SELECT 1 FROM d)
		)
		SELECT kind, partition_key, paused_at, paused_by, reason FROM d
		 WHERE (SELECT count(*) FROM n) >= 0
		 ORDER BY partition_key`),
		s.kind, pgdialect.Array(ks), EventResumed, by,
		s.kind, pgdialect.Array(ks), pgdialect.Array(ks), pgdialect.Array(ks),
		notify.Channel, notify.Payload(notify.Resumed, s.kind))
	if err != nil {
		return nil, fmt.Errorf("resuming %s: %w", s.pauseTarget(keys), err)
	}
	return scanPauses(rows, "resuming "+s.pauseTarget(keys))
}

// Paused lists the pauses in force of s's kind: the kind's own first (Key
// ""), then the partitions' in key order.
func (s *Store) Paused(ctx context.Context) ([]Pause, error) {
	rows, err := s.db.QueryContext(ctx, s.sql(`
		SELECT kind, partition_key, paused_at, paused_by, reason FROM {{.Schema}}.pauses
		 WHERE kind = ? ORDER BY partition_key`), s.kind)
	if err != nil {
		return nil, fmt.Errorf("listing the pauses of kind %s: %w", s.kind, err)
	}
	return scanPauses(rows, "listing the pauses of kind "+s.kind)
}

// pauseKeys is the pauses' keys for keys: "" (the kind) for none.
func pauseKeys(keys []string) []string {
	if len(keys) == 0 {
		return []string{""}
	}
	return keys
}

// checkPauseKeys refuses an empty partition key, which would name the
// kind.
func checkPauseKeys(keys []string) error {
	for _, k := range keys {
		if k == "" {
			return errors.New("pausing or resuming: empty partition key (name none to pause or resume the kind)")
		}
	}
	return nil
}

// pauseTarget names what keys pause, for errors.
func (s *Store) pauseTarget(keys []string) string {
	if len(keys) == 0 {
		return "kind " + s.kind
	}
	return fmt.Sprintf("%d partition(s) of kind %s", len(keys), s.kind)
}

func scanPauses(rows *sql.Rows, doing string) ([]Pause, error) {
	defer rows.Close()
	var out []Pause
	for rows.Next() {
		var p Pause
		if err := rows.Scan(&p.Kind, &p.Key, &p.Since, &p.By, &p.Reason); err != nil {
			return nil, fmt.Errorf("%s: %w", doing, err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", doing, err)
	}
	return out, nil
}
