package partition

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Queryer runs a query (a pgx.Tx satisfies it).
type Queryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Rewind moves a partition's checkpoint back to Position with State.
type Rewind struct {
	Key      string
	Position int64
	State    json.RawMessage
}

// Rewound is a partition Rewind moved back.
type Rewound struct {
	Key                                                       string
	Generation, Version, PreviousGeneration, PreviousPosition int64
}

// RewindPgx rewinds partitions of s's kind in tx: generation and version
// go up by one, the checkpoint becomes Position and State, the owner is
// cleared and the row is claimable now.
func (s *Store) RewindPgx(ctx context.Context, tx Queryer, rw []Rewind) ([]Rewound, error) {
	keys := make([]string, len(rw))
	pos := make([]int64, len(rw))
	states := make([]string, len(rw))
	for i, r := range rw {
		keys[i], pos[i], states[i] = r.Key, r.Position, string(r.State)
		if states[i] == "" {
			states[i] = "{}"
		}
	}
	rows, err := tx.Query(ctx, s.sql(`
WITH l AS (
    SELECT t.partition_key, t.generation, t.position, t.available FROM {{.Schema}}.tasks t
     WHERE t.kind = $1 AND t.partition_key = ANY ($2::text[])
     ORDER BY t.partition_key FOR UPDATE
), u AS (
    UPDATE {{.Schema}}.tasks t
       SET generation = t.generation + 1, version = t.version + 1, position = r.pos, checkpoint = r.state::jsonb,
           owner = NULL, claimed_at = NULL, heartbeat_at = NULL, lease_expires_at = '-infinity', updated_at = now()
      FROM l, unnest($2::text[], $3::bigint[], $4::text[]) AS r(key, pos, state)
     WHERE t.kind = $1 AND t.partition_key = l.partition_key AND r.key = l.partition_key
       AND r.pos BETWEEN 0 AND l.available
    RETURNING t.partition_key, t.generation, t.version, l.generation AS prev_gen, l.position AS prev_pos
), n AS (SELECT pg_notify($5, $6) FROM (SELECT 1 FROM u LIMIT 1) x)
SELECT u.*, (SELECT count(*) FROM n) FROM u ORDER BY partition_key`), s.kind, keys, pos, states, NotifyChannel, NotifyPayload(NotifyRetry, s.kind))
	if err != nil {
		return nil, fmt.Errorf("rewinding %d partitions: %w", len(rw), err)
	}
	var out []Rewound
	var r Rewound
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&r.Key, &r.Generation, &r.Version, &r.PreviousGeneration, &r.PreviousPosition, &n}, func() error {
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("rewinding %d partitions: %w", len(rw), err)
	}
	if len(out) != len(rw) {
		return nil, fmt.Errorf("rewinding %d partitions: %d rewound (a missing partition or a position beyond available)", len(rw), len(out))
	}
	return out, nil
}
