package taskstore

import (
	"context"
	"fmt"
	"github.com/batonhq/baton/internal/leaseinfo"
	"time"

	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/schema"
)

// StatementSQL is the text of a coordination statement as sent, over the
// default schema, for tests that explain its plans.
func StatementSQL(name string) string {
	q := map[string]string{
		"Candidates": candidatesSQL, "StaleCandidates": staleCandidatesSQL,
		"Heartbeat": heartbeatSQL, "Heartbeat18": heartbeatSQL18, "FairShareLoad": fairShareSQL,
	}[name]
	return schema.SQL(schema.Default, q)
}

// WithServerVersion returns a copy of s that takes the server to be of
// server_version_num num (180004 for 18.4) rather than read it, and so
// sends the statements written for that version (until one fails to
// parse): to run an older form on a newer server.
func WithServerVersion(s *Store, num int) *Store {
	c := *s
	c.version = &serverVersion{}
	c.version.num.Store(int64(num))
	return &c
}

// SetFloorMargin sets s's FloorMargin, for tests that cannot wait ten
// seconds for a floor to pass a row.
func SetFloorMargin(s *Store, d time.Duration) {
	s.floor.mu.Lock()
	defer s.floor.mu.Unlock()
	s.floor.margin = d
}

// FloorArg is the floor s's reads of the claimable rows start from now,
// unless a full read is due, as passed to the statements ("-infinity":
// from the beginning).
func FloorArg(s *Store) string {
	s.floor.mu.Lock()
	defer s.floor.mu.Unlock()
	if s.floor.at.IsZero() {
		return "-infinity"
	}
	return s.floor.at.UTC().Format(time.RFC3339Nano)
}

// Heartbeat is HeartbeatBelow rewriting every lease listed, for tests that
// do not care about the threshold (the workers pass one, and the
// conformance suite runs theirs).
func (s *Store) Heartbeat(ctx context.Context, w Worker, ttl time.Duration, leases []partition.Lease) ([]leaseinfo.Renewal, error) {
	return s.HeartbeatBelow(ctx, w, ttl, ttl+time.Hour, leases)
}

// ClusterLoad counts exactly, reading every row, what FairShareLoad
// bounds: the fair-share inputs of s's kind (SelfBacklog aside), for tests
// that compare the two.
func (s *Store) ClusterLoad(ctx context.Context) (Load, error) {
	var l Load
	err := s.db.QueryRowContext(ctx, s.sql(`
		SELECT
		  (SELECT count(*) FROM {{.Schema}}.tasks
		    WHERE kind = ?0 AND failed_at IS NULL AND available > position)
		+ (SELECT count(*) FROM {{.Schema}}.tasks
		    WHERE kind = ?0 AND owner IS NOT NULL AND lease_expires_at > now() AND available <= position),
		  (SELECT count(*) FROM {{.Schema}}.workers WHERE kind = ?0 AND expires_at > now() AND stopped_at IS NULL),
		  (SELECT count(*) FROM {{.Schema}}.tasks WHERE kind = ?0 AND failed_at IS NOT NULL),
		  (SELECT count(*) FROM {{.Schema}}.tasks
		    WHERE kind = ?0 AND available > position AND failed_at IS NULL AND lease_expires_at <= now()),
		  coalesce((SELECT min(n) FROM (
		    SELECT count(t.partition_key) AS n
		    FROM {{.Schema}}.workers w
		    LEFT JOIN {{.Schema}}.tasks t ON t.kind = w.kind AND t.owner = w.instance_id AND t.lease_expires_at > now()
		    WHERE w.kind = ?0 AND w.expires_at > now() AND w.stopped_at IS NULL
		    GROUP BY w.instance_id) h), 0),
		  (SELECT coalesce(sum(available - position), 0) FROM {{.Schema}}.tasks
		    WHERE kind = ?0 AND failed_at IS NULL AND available > position)`), s.kind).Scan(
		&l.Busy, &l.LiveWorkers, &l.Quarantined, &l.Unclaimed, &l.MinHeld, &l.Backlog)
	if err != nil {
		return l, fmt.Errorf("reading cluster load: %w", err)
	}
	return l, nil
}
