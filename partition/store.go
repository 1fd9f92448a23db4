package partition

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/batonhq/baton/internal/notify"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/schema"
)

// ErrFenced is returned when a write is attempted under a claim that is no
// longer current: the partition was taken over, released or quarantined;
// or (package schedule) a job run's job was taken over, or its lease ran
// out.
var ErrFenced = errors.New("claim is no longer current")

// Lease identifies one claim: a partition at the version its claim set.
// Every change of ownership bumps the version, so (Key, Version) names one
// holder's tenure exactly.
type Lease struct {
	Key     string // the partition
	Version int64  // the version this claim set
}

// String formats the lease as key@vVERSION, for logs and errors.
func (l Lease) String() string { return fmt.Sprintf("%s@v%d", l.Key, l.Version) }

// Store is the producers' and operators' view of the tasks table, bound
// once to a database handle, a schema and the task rows of one kind (Kind;
// DefaultKind unless set): it adds work (AddWork, AddWorks, each in a
// transaction of its own, or AddWorkTx, AddWorksTx in the caller's), rewinds it
// (Rewind, RewindTx), reports it (Status, Progress,
// History, RecentEvents, Takeovers), repairs it (Retry) and pauses it
// (Pause, PauseTx, Resume, ResumeTx, Paused). Its methods
// are safe for concurrent use. The protocol's statements, which claim,
// renew, fence, advance and release partitions, are the workers' and are
// not part of this package's API.
//
// A kind is the processor a partition belongs to, as a job's kind names its
// queue: several processors may share baton's schema, with partitions of
// the same names, and each sees only its own. A partition is (kind,
// partition_key); every statement, the workers' and a Store's alike,
// names its kind, so a Store of one kind can neither report, retry nor
// add work to another kind's rows.
//
// Row-lock discipline (producers writing task rows themselves must follow
// it too):
//   - every statement that changes ownership (version) first locks the row
//     FOR UPDATE, which conflicts with a batch's fence (FOR KEY SHARE);
//   - heartbeats and work-counter updates (AddWork) lock FOR NO KEY
//     UPDATE, which does not wait for batches in flight; heartbeats SKIP
//     LOCKED rows rather than wait for a load;
//   - statements locking several task rows lock them in (kind,
//     partition_key) order, so concurrent heartbeats, claims, releases and
//     loads cannot deadlock. Each statement locks rows of its own kind
//     only, in partition_key order; a producer adding work to several
//     kinds in one transaction must add it in kind order (byte order) too.
type Store struct {
	db     *dbconn.DB
	schema string
	kind   string
}

// NewStore returns a Store over db for the task rows of kind DefaultKind
// in PostgreSQL schema schemaName; empty means schema.Default ("baton").
// Every statement names its tables with that schema, so the session's
// search_path does not matter. Kind binds it to another kind. The methods
// without a transaction run on db, each in a transaction of its own; the
// Tx methods run in the caller's transaction (begun on db with BeginTx or
// RunInTx).
func NewStore(db *dbconn.DB, schemaName string) *Store {
	return &Store{db: db, schema: cmp.Or(schemaName, schema.Default), kind: DefaultKind}
}

// DefaultKind is the kind of a Store, and of a distributor's Config, that
// names none.
const DefaultKind = "default"

// MaxKindLen is the longest kind, in bytes.
const MaxKindLen = 64

// ValidateKind reports whether kind can name a kind: 1 to MaxKindLen bytes
// of valid UTF-8, without white space, control characters or "/" (they
// separate a kind from what follows it in notifications and idempotency
// keys).
func ValidateKind(kind string) error {
	switch {
	case kind == "":
		return errors.New("kind is empty")
	case len(kind) > MaxKindLen:
		return fmt.Errorf("kind %.20q… is longer than %d bytes", kind, MaxKindLen)
	case !utf8.ValidString(kind):
		return fmt.Errorf("kind %q is not valid UTF-8", kind)
	case strings.IndexFunc(kind, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) || r == '/' }) >= 0:
		return fmt.Errorf("kind %q contains white space, a control character or \"/\"", kind)
	}
	return nil
}

// Kind returns a copy of s for the task rows of kind (empty means
// DefaultKind): it reports, retries and adds work to rows of that kind
// only. Producers refuse a kind that ValidateKind
// refuses (a distributor validates its Config.Kind).
//
//	orders := partition.NewStore(db, "").Kind("orders")
//	r, err := orders.AddWorkTx(ctx, tx, customer, n) // an "orders" partition
func (s *Store) Kind(kind string) *Store {
	c := *s
	c.kind = cmp.Or(kind, DefaultKind)
	return &c
}

// KindName is the kind of the task rows s works on.
func (s *Store) KindName() string { return s.kind }

// sql qualifies q's table names with the store's schema.
func (s *Store) sql(q string) string { return schema.SQL(s.schema, q) }

// inTx runs fn in a transaction of its own on db (an X method's XTx).
func inTx[T any](ctx context.Context, db *dbconn.DB, fn func(ctx context.Context, tx bun.Tx) (T, error)) (T, error) {
	var out T
	err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var err error
		out, err = fn(ctx, tx)
		return err
	})
	return out, err
}

func interval(d time.Duration) string { return fmt.Sprintf("%d microseconds", d.Microseconds()) }

// Checkpoint is a partition's committed progress, read under the fence.
type Checkpoint struct {
	Position  int64           // checkpoint position
	Available int64           // items produced (high-water mark)
	State     json.RawMessage // processor state committed with Position
	// Traceparent is the W3C trace context of the batch that committed
	// this checkpoint, "" if it was not traced.
	Traceparent string
	// Generation is the generation of the partition's output this
	// checkpoint belongs to: 1 until the partition is first rewound (see
	// Store.Rewind), one more after each rewind. A processor that keeps
	// its output by generation writes under this one.
	Generation int64
}

// ErrCheckpointMoved is returned by a batch's checkpoint update when the
// checkpoint is no longer the one the fence read, although the claim is
// still current: an earlier commit of the same claim, whose outcome the worker could not
// learn, has applied in the meantime. The batch must roll back and be
// retried from the new checkpoint.
var ErrCheckpointMoved = errors.New("checkpoint moved since the fence read it")

// Progress re-reads a partition's version and position, to resolve a
// commit whose outcome is unknown.
func (s *Store) Progress(ctx context.Context, key string) (version, position int64, err error) {
	err = s.db.QueryRowContext(ctx, s.sql(`SELECT version, position FROM {{.Schema}}.tasks WHERE kind = ? AND partition_key = ?`), s.kind, key).
		Scan(&version, &position)
	if err != nil {
		return 0, 0, fmt.Errorf("re-reading progress of %s: %w", key, err)
	}
	return version, position, nil
}

// ErrNotFound is returned for an unknown partition (Retry) or job
// (package schedule), wrapped with what was looked for.
var ErrNotFound = errors.New("not found")

// Retry re-enables a quarantined or backing-off partition of s's kind,
// and its segments that are (a partition split into segments is
// quarantined when one of them is; see Status): attempts reset, claimable
// at once. It reports whether anything changed, and ErrNotFound if s's
// kind has no partition key.
func (s *Store) Retry(ctx context.Context, key string) (bool, error) {
	return s.RetryBy(ctx, key, "")
}

// RetryBy is Retry recording who asked (for example "console") in the
// partition's history.
func (s *Store) RetryBy(ctx context.Context, key, actor string) (bool, error) {
	var (
		n     int
		since int64
	)
	err := s.db.QueryRowContext(ctx, s.sql(`
		WITH r AS (
			SELECT kind, partition_key FROM {{.Schema}}.tasks
			WHERE kind = ? AND (partition_key = ? OR segment_of = ?) AND owner IS NULL AND (failed_at IS NOT NULL OR attempts > 0)
			ORDER BY partition_key
			FOR UPDATE
		), u AS (
			UPDATE {{.Schema}}.tasks t
			SET failed_at = NULL, attempts = 0, last_error = NULL, lease_expires_at = '-infinity',
			    version = t.version + 1, updated_at = now()
			FROM r WHERE t.kind = r.kind AND t.partition_key = r.partition_key
			RETURNING t.kind, t.partition_key, t.version
		), e AS (
			INSERT INTO {{.Schema}}.events (task_kind, partition_key, kind, version, detail)
			SELECT kind, partition_key, ?, version, nullif(?, '') FROM u
		)
		SELECT count(*), (extract(epoch FROM statement_timestamp()) * 1000000)::bigint FROM u`), s.kind, key, key, EventRetried, actor).Scan(&n, &since)
	if err != nil {
		return false, fmt.Errorf("retrying partition %s: %w", key, err)
	}
	if n > 0 {
		// With the time of the update: the rows became claimable no
		// earlier.
		return true, s.notify(ctx, notify.Retry+" "+s.kind+" "+strconv.FormatInt(since, 10))
	}
	var exists bool
	if err := s.db.QueryRowContext(ctx, s.sql(`SELECT EXISTS (SELECT 1 FROM {{.Schema}}.tasks WHERE kind = ? AND partition_key = ?)`), s.kind, key).Scan(&exists); err != nil {
		return false, fmt.Errorf("retrying partition %s: %w", key, err)
	}
	if !exists {
		return false, fmt.Errorf("retrying partition %s of kind %s: %w", key, s.kind, ErrNotFound)
	}
	return false, nil
}

// notify wakes the workers of s's kind waiting for claimable work with
// payload (notify.Payload).
func (s *Store) notify(ctx context.Context, payload string) error {
	if _, err := s.db.ExecContext(ctx, `SELECT pg_notify(?, ?)`, notify.Channel, payload); err != nil {
		return fmt.Errorf("notifying workers: %w", err)
	}
	return nil
}
