package pricer

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/schema"
)

// CheckpointMismatch is a contract whose checkpoint (its task row's
// position) disagrees with the number of priced rows.
type CheckpointMismatch struct {
	ContractID string
	Position   int64
	Priced     int64
}

// VerifyCheckpoints compares every contract's checkpoint with its priced
// output: the records up to position are priced exactly once, none beyond.
func VerifyCheckpoints(ctx context.Context, db bun.IDB, schemaName string) ([]CheckpointMismatch, error) {
	rows, err := db.QueryContext(ctx, schema.SQL(schemaName, `
		SELECT t.partition_key, t.position, coalesce(p.n, 0), coalesce(p.max_seq, 0)
		FROM {{.Schema}}.tasks t
		LEFT JOIN (SELECT contract_id, count(*) AS n, max(seq) AS max_seq FROM {{.Schema}}.priced GROUP BY contract_id) p
		  ON p.contract_id = t.partition_key
		WHERE t.position <> coalesce(p.n, 0) OR t.position <> coalesce(p.max_seq, 0)
		ORDER BY t.partition_key`))
	if err != nil {
		return nil, fmt.Errorf("verifying checkpoints: %w", err)
	}
	defer rows.Close()
	var out []CheckpointMismatch
	for rows.Next() {
		var m CheckpointMismatch
		var maxSeq int64
		if err := rows.Scan(&m.ContractID, &m.Position, &m.Priced, &maxSeq); err != nil {
			return nil, fmt.Errorf("verifying checkpoints: %w", err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("verifying checkpoints: %w", err)
	}
	return out, nil
}
