package partition

import (
	"context"
	"fmt"
)

// QuarantinedPartitions counts the partitions of s's kind that are
// quarantined: whose own task row, or a segment's, failed its last
// attempts. A partition split into segments counts once, however many of
// its segments are quarantined (distributor.IncompleteError counts task
// rows). It reads the whole table: call it rarely, as at the end of an
// until-done run.
func (s *Store) QuarantinedPartitions(ctx context.Context) (int, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, s.sql(`
		SELECT count(DISTINCT coalesce(segment_of, partition_key)) FROM {{.Schema}}.tasks
		 WHERE kind = ? AND failed_at IS NOT NULL`), s.kind).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting quarantined partitions of kind %s: %w", s.kind, err)
	}
	return n, nil
}
