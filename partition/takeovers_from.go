package partition

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// InstanceTakeovers are the takeovers of the partitions one worker
// instance held, as the events table records them.
type InstanceTakeovers struct {
	Taken   int // partitions of s's kind taken over from the instance
	Resumed int // of those, the ones whose new owner committed a first batch
	Held    int // partitions with work the instance still owns
	// Min and Max are the takeover times of the resumed ones: from the
	// instance's last heartbeat that renewed the lease to the new owner's
	// first committed batch, by the database clock.
	Min, Max time.Duration
	// FirstKey is the first partition resumed, FirstBy the instance that
	// resumed it.
	FirstKey, FirstBy string
}

// Complete reports whether nothing is left to take over from the instance
// or to resume.
func (t InstanceTakeovers) Complete() bool { return t.Held == 0 && t.Resumed == t.Taken }

// TakeoversFrom reads the takeovers of s's kind's partitions from the
// worker instance owner (an instance id, name#suffix), typically one that
// was killed.
func (s *Store) TakeoversFrom(ctx context.Context, owner string) (InstanceTakeovers, error) {
	var t InstanceTakeovers
	var minMS, maxMS int64
	var firstKey, firstBy sql.NullString
	err := s.db.QueryRowContext(ctx, s.sql(`
		SELECT count(*), count(f.takeover_ms), coalesce(min(f.takeover_ms), 0), coalesce(max(f.takeover_ms), 0),
		       (array_agg(f.partition_key ORDER BY f.event_id) FILTER (WHERE f.takeover_ms IS NOT NULL))[1],
		       (array_agg(f.worker ORDER BY f.event_id) FILTER (WHERE f.takeover_ms IS NOT NULL))[1],
		       (SELECT count(*) FROM {{.Schema}}.tasks WHERE kind = ? AND owner = ? AND available > position)
		FROM {{.Schema}}.events k
		LEFT JOIN {{.Schema}}.events f ON f.task_kind = k.task_kind AND f.partition_key = k.partition_key
		     AND f.version = k.version AND f.kind = ?
		WHERE k.task_kind = ? AND k.kind = ? AND k.prev_owner = ?`),
		s.kind, owner, EventFirstBatch, s.kind, EventTakeover, owner).
		Scan(&t.Taken, &t.Resumed, &minMS, &maxMS, &firstKey, &firstBy, &t.Held)
	if err != nil {
		return t, fmt.Errorf("reading the takeovers from %s: %w", owner, err)
	}
	t.Min, t.Max = time.Duration(minMS)*time.Millisecond, time.Duration(maxMS)*time.Millisecond
	t.FirstKey, t.FirstBy = firstKey.String, firstBy.String
	return t, nil
}
