package partition

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/batonhq/baton/internal/notify"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/batonhq/baton/internal/pgxwork"
)

// Rewind asks for one partition to be processed again from Position, under
// a new generation (see Store.Rewind).
type Rewind struct {
	Key      string
	Position int64 // processing resumes after this position (0: from the start)
	// State is the processor state at Position, as a batch ending there
	// would have committed it (nil: the empty object, as for a partition
	// never processed).
	State json.RawMessage
}

// Rewound is what a rewind did to one partition.
type Rewound struct {
	Key                string
	Generation         int64 // the new generation
	Version            int64 // the version the rewind set; every earlier claim is fenced
	PreviousGeneration int64
	PreviousPosition   int64
}

// ErrBadRewind is wrapped by Rewind's error for a request it refuses: an
// unknown partition, a position outside 0 … available, a key asked twice.
var ErrBadRewind = errors.New("cannot rewind")

// Rewind is RewindTx in a transaction of its own.
func (s *Store) Rewind(ctx context.Context, rw []Rewind) ([]Rewound, error) {
	return inTx(ctx, s.db, func(ctx context.Context, tx bun.Tx) ([]Rewound, error) { return s.RewindTx(ctx, tx, rw) })
}

// RewindTx makes each partition of rw (of s's kind) start a new generation
// of its output: in tx, the caller's transaction, each row gets generation
// + 1, version + 1, the given position and state, no owner, no failure or
// back-off, and becomes claimable at once; the partition's segments are
// deleted; the workers of the kind are notified when tx commits. Rows are
// locked in key order, as every other multi-row locker of task rows does,
// each partition before its segments are looked for (see rewindLocks).
//
// The version bump is the fence: a claim of the previous generation (its
// owner may be in the middle of a batch) can no longer commit a batch, an
// advance or a release, and its owner stops processing the partition as
// it would after a takeover. The next claim reads the new generation in
// its checkpoint (Checkpoint.Generation) and processes from Position. So
// each generation's work is committed exactly once, under that
// generation, and nothing of an earlier generation's claims lands in a
// later one. Positions may move back or forward, within 0 … available.
//
// Whatever the processor keeps per generation (its output, what the
// rewind's reason was) it writes in tx too, so that the rewind and its
// bookkeeping commit together. RewindTx returns ErrBadRewind, having
// changed nothing, if a partition does not exist, a position is out of
// range or a key is repeated.
func (s *Store) RewindTx(ctx context.Context, tx bun.Tx, rw []Rewind) ([]Rewound, error) {
	q, args, err := s.rewindSQL(rw, "?")
	if err != nil || q == "" {
		return nil, err
	}
	lock, keys := s.rewindLocks(rw, "?")
	held := heldKeys(keys)
	for i := range keys {
		if _, err := tx.ExecContext(ctx, lock, s.rewindLockArgs(keys, held, i, "?")...); err != nil {
			return nil, fmt.Errorf("rewinding %d partition(s) of kind %s: locking %s: %w", len(rw), s.kind, keys[i], err)
		}
	}
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("rewinding %d partition(s) of kind %s: %w", len(rw), s.kind, err)
	}
	return s.rewound(rw, rows)
}

// rewindPgx is RewindTx for a transaction on a pgx connection
// (internal/pgxwork).
func (s *Store) rewindPgx(ctx context.Context, tx pgxwork.Tx, rw []Rewind) ([]Rewound, error) {
	q, args, err := s.rewindSQL(rw, "$")
	if err != nil || q == "" {
		return nil, err
	}
	lock, keys := s.rewindLocks(rw, "$")
	held := heldKeys(keys)
	// The lock statements go in one pipeline: the server still runs
	// them one after the other, each with a snapshot taken once the one
	// before holds its rows, but without a round trip between them (of
	// 10,000, about 0.3 ms each).
	b := &pgx.Batch{}
	for i := range keys {
		b.Queue(lock, s.rewindLockArgs(keys, held, i, "$")...)
	}
	br := tx.SendBatch(ctx, b)
	for i := range keys {
		rows, err := br.Query()
		if err == nil {
			rows.Close()
			err = rows.Err()
		}
		if err != nil {
			br.Close()
			return nil, fmt.Errorf("rewinding %d partition(s) of kind %s: locking %s: %w", len(rw), s.kind, keys[i], err)
		}
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("rewinding %d partition(s) of kind %s: locking: %w", len(rw), s.kind, err)
	}
	rows, err := tx.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("rewinding %d partition(s) of kind %s: %w", len(rw), s.kind, err)
	}
	return s.rewound(rw, pgxRows{rows})
}

// rewindLocks returns the statement that locks the rows of a rewind's
// partitions before the rewind statement (rewindSQL) runs, and the
// partitions' keys in order; the statement runs once per key, with
// rewindLockArgs. A segment can only be looked for once its partition is
// locked: a split of the partition commits in a batch that holds the
// partition's row (FOR KEY SHARE, under the batch's fence), so a split
// that commits while the rewind waits for that row writes segments that a
// statement which started before could not see (READ COMMITTED re-checks
// only the rows it found); once the row is locked no split of it can
// commit, and a statement that starts then sees all of its segments.
//
// So the i-th statement locks, FOR UPDATE and in key order, the segments
// of the partitions already locked whose keys lie between the previous
// partition's and this one's (read with a snapshot taken after those
// partitions were locked), then the i-th partition; the rewind statement
// then locks the segments after the last partition and holds every row
// already. The rows are thus taken in key order, each partition's
// segments looked for only once it is held: a partition's segments sort
// after it (partition.SegmentKey), and any of the rewind's other keys
// sorting in between are locked in their place. Every statement of a
// rewind begins with the comment "-- baton rewind", by which tests find
// it waiting (pg_stat_activity.query).
func (s *Store) rewindLocks(rw []Rewind, style string) (string, []string) {
	keys := make([]string, len(rw))
	for i, r := range rw {
		keys[i] = r.Key
	}
	slices.Sort(keys)
	p := func(n int) string {
		if style == "?" {
			return "?"
		}
		return fmt.Sprintf("$%d", n)
	}
	return s.sql(`
		-- baton rewind: lock
		SELECT t.partition_key FROM {{.Schema}}.tasks t
		WHERE t.kind = ` + p(1) + ` AND (t.partition_key = ` + p(2) + ` OR
		      t.segment_of = ANY (` + p(3) + `::text[]) AND t.partition_key > ` + p(4) + ` AND t.partition_key < ` + p(5) + `)
		ORDER BY t.partition_key
		FOR UPDATE OF t`), keys
}

// heldKeys is the set of a rewind's keys, for rewindLockArgs.
func heldKeys(keys []string) map[string]bool {
	held := make(map[string]bool, len(keys))
	for _, k := range keys {
		held[k] = true
	}
	return held
}

// rewindLockArgs are the arguments of rewindLocks' statement for the i-th
// partition of keys (sorted; held is their set). Of the partitions already
// locked, it names only those whose segments can lie between the previous
// key and this one: the previous key itself and those of the rewind's keys
// that are prefixes of it. A segment's key is its partition's, "#" and
// digits, so a segment of a partition P ≤ the previous key that sorts
// after that key (byte order, the keys' collation "C") has P as a prefix
// of it: where the two first differ, the previous key is the greater, and
// so is it than every key that starts with P. Naming every partition
// already locked would send the i-th statement i keys, a rewind of n
// partitions n²/2 in all (50 million for 10,000).
func (s *Store) rewindLockArgs(keys []string, held map[string]bool, i int, style string) []any {
	prev := []string{}
	after := ""
	if i > 0 {
		after = keys[i-1]
		for l := 0; l <= len(after); l++ {
			if held[after[:l]] {
				prev = append(prev, after[:l])
			}
		}
	}
	var heldArg any = prev
	if style == "?" {
		heldArg = pgdialect.Array(prev)
	}
	return []any{s.kind, keys[i], heldArg, after, keys[i]}
}

// rewindRows is what Rewind reads its result from: *sql.Rows or pgx.Rows.
type rewindRows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

type pgxRows struct{ pgx.Rows }

func (r pgxRows) Close() error { r.Rows.Close(); return nil }

// rewindSQL validates rw and returns the rewind statement, with ? or $n
// placeholders, and its arguments. The statement returns every key asked
// for, with whether its row exists and its available, and, if it was
// rewound, its new generation and version and its previous generation and
// position. It updates every row asked for or, if one request is refused
// (a missing partition, a position beyond available), none. It runs after
// rewindLocks' statements, so its snapshot is taken with the partitions
// locked: it finds (and deletes) every segment they have, those a split
// committed while the rewind waited for the partition included.
func (s *Store) rewindSQL(rw []Rewind, style string) (string, []any, error) {
	if err := ValidateKind(s.kind); err != nil {
		return "", nil, fmt.Errorf("rewinding: %w", err)
	}
	if len(rw) == 0 {
		return "", nil, nil
	}
	sorted := slices.Clone(rw)
	slices.SortFunc(sorted, func(a, b Rewind) int { return strings.Compare(a.Key, b.Key) })
	keys := make([]string, len(sorted))
	positions := make([]int64, len(sorted))
	states := make([]string, len(sorted))
	for i, r := range sorted {
		switch {
		case r.Key == "":
			return "", nil, fmt.Errorf("rewinding: %w: empty partition key", ErrBadRewind)
		case r.Position < 0:
			return "", nil, fmt.Errorf("rewinding %s to position %d: %w: a position is at least 0", r.Key, r.Position, ErrBadRewind)
		case i > 0 && keys[i-1] == r.Key:
			return "", nil, fmt.Errorf("rewinding %s: %w: the partition is asked for twice", r.Key, ErrBadRewind)
		}
		keys[i], positions[i] = r.Key, r.Position
		states[i] = "{}"
		if len(r.State) > 0 {
			if !json.Valid(r.State) {
				return "", nil, fmt.Errorf("rewinding %s: %w: its state is not JSON", r.Key, ErrBadRewind)
			}
			states[i] = string(r.State)
		}
	}
	p := func(n int) string {
		if style == "?" {
			return "?"
		}
		return fmt.Sprintf("$%d", n)
	}
	// Placeholders in order of appearance (for "?"), numbered for "$".
	q := s.sql(`
		-- baton rewind
		WITH w AS (
			SELECT key, pos, st FROM unnest(` + p(1) + `::text[], ` + p(2) + `::bigint[], ` + p(3) + `::text[]) AS w(key, pos, st)
		), l AS (
			SELECT t.kind, t.partition_key, t.segment_of, t.generation, t.position, t.available, t.version
			FROM {{.Schema}}.tasks t
			WHERE t.kind = ` + p(4) + ` AND (t.partition_key IN (SELECT key FROM w) OR t.segment_of IN (SELECT key FROM w))
			ORDER BY t.partition_key
			FOR UPDATE OF t
		), r AS (
			SELECT * FROM l WHERE l.segment_of IS NULL
		), ok AS (
			SELECT count(*) = (SELECT count(*) FROM w) AS all_ok
			FROM w JOIN r ON r.partition_key = w.key
			WHERE w.pos <= r.available
		), d AS (
			DELETE FROM {{.Schema}}.tasks t
			USING l
			WHERE t.kind = l.kind AND t.partition_key = l.partition_key AND l.segment_of IS NOT NULL AND (SELECT all_ok FROM ok)
			RETURNING t.partition_key
		), u AS (
			UPDATE {{.Schema}}.tasks t
			SET generation = t.generation + 1, version = t.version + 1, position = w.pos, checkpoint = w.st::jsonb,
			    owner = NULL, lease_expires_at = '-infinity', failed_at = NULL, attempts = 0, last_error = NULL,
			    traceparent = NULL, updated_at = now()
			FROM r JOIN w ON w.key = r.partition_key
			WHERE t.kind = ` + p(5) + ` AND t.partition_key = r.partition_key AND (SELECT all_ok FROM ok)
			RETURNING t.partition_key, t.generation, t.version, t.position, r.generation AS prev_generation, r.position AS prev_position
		), e AS (
			INSERT INTO {{.Schema}}.events (task_kind, partition_key, kind, version, position, detail)
			SELECT ` + p(6) + `, partition_key, ` + p(7) + `, version, position,
			       format('generation %s from position %s (generation %s was at %s)', generation, position, prev_generation, prev_position)
			FROM u
		), n AS (
			SELECT pg_notify(` + p(8) + `, ` + p(9) + ` || ' ' || (extract(epoch FROM clock_timestamp()) * 1000000)::bigint)
			FROM (SELECT 1 FROM u LIMIT 1) x
		)
		SELECT w.key, r.partition_key IS NOT NULL, coalesce(r.available, 0),
		       coalesce(u.generation, 0), coalesce(u.version, 0), coalesce(u.prev_generation, 0), coalesce(u.prev_position, 0)
		FROM w LEFT JOIN r ON r.partition_key = w.key LEFT JOIN u ON u.partition_key = w.key
		WHERE (SELECT count(*) FROM n) >= 0 AND (SELECT count(*) FROM d) >= 0
		ORDER BY w.key`)
	args := []any{keys, positions, states, s.kind, s.kind, s.kind, string(EventRewound),
		notify.Channel, notify.Payload(notify.Work, s.kind)}
	if style == "?" {
		args[0], args[1], args[2] = pgdialect.Array(keys), pgdialect.Array(positions), pgdialect.Array(states)
	}
	return q, args, nil
}

// rewound reads the rewind statement's result: the rewinds done, in key
// order, or ErrBadRewind naming what was refused.
func (s *Store) rewound(rw []Rewind, rows rewindRows) ([]Rewound, error) {
	defer rows.Close()
	positions := make(map[string]int64, len(rw))
	for _, r := range rw {
		positions[r.Key] = r.Position
	}
	var out []Rewound
	var refused []string
	for rows.Next() {
		var r Rewound
		var exists bool
		var available int64
		if err := rows.Scan(&r.Key, &exists, &available, &r.Generation, &r.Version, &r.PreviousGeneration, &r.PreviousPosition); err != nil {
			return nil, fmt.Errorf("rewinding %d partition(s) of kind %s: %w", len(rw), s.kind, err)
		}
		switch {
		case !exists:
			refused = append(refused, fmt.Sprintf("%s: no such partition", r.Key))
		case positions[r.Key] > available:
			refused = append(refused, fmt.Sprintf("%s: position %d is beyond its %d items", r.Key, positions[r.Key], available))
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("rewinding %d partition(s) of kind %s: %w", len(rw), s.kind, err)
	}
	if len(refused) > 0 {
		return nil, fmt.Errorf("rewinding partitions of kind %s: %w: %s", s.kind, ErrBadRewind, strings.Join(refused, "; "))
	}
	return out, nil
}
