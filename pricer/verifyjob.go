package pricer

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/schedule"
)

// VerifyBuiltin is the name of the built-in consistency-check job.
const VerifyBuiltin = "verify"

// CheckpointMismatch is a contract whose checkpoint (its task row's
// position) disagrees with the number of priced rows.
type CheckpointMismatch struct {
	ContractID string
	Position   int64
	Priced     int64
}

// VerifyCheckpoints compares every contract's checkpoint with its priced
// output: the records up to position are priced exactly once, none beyond.
func VerifyCheckpoints(ctx context.Context, db bun.IDB) ([]CheckpointMismatch, error) {
	rows, err := db.QueryContext(ctx, `
		SELECT t.partition_key, t.position, coalesce(p.n, 0), coalesce(p.max_seq, 0)
		FROM tasks t
		LEFT JOIN (SELECT contract_id, count(*) AS n, max(seq) AS max_seq FROM priced GROUP BY contract_id) p
		  ON p.contract_id = t.partition_key
		WHERE t.position <> coalesce(p.n, 0) OR t.position <> coalesce(p.max_seq, 0)
		ORDER BY t.partition_key`)
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

// VerifyJob is the built-in "verify" job: it recomputes every contract's
// totals independently in SQL (Verify), compares them with the priced
// output and the checkpoints (VerifyCheckpoints), logs every mismatch
// (event verify_mismatch), reports the count to onResult (for a metric; may
// be nil), and fails the run, naming the mismatches, if there is any.
func VerifyJob(db bun.IDB, logger *slog.Logger, onResult func(mismatches int)) schedule.RunFunc {
	return func(ctx context.Context, r *schedule.Run) error {
		sum, err := Verify(ctx, db)
		if err != nil {
			return err
		}
		cps, err := VerifyCheckpoints(ctx, db)
		if err != nil {
			return err
		}
		var problems []string
		for _, m := range sum.Mismatches {
			problems = append(problems, m.Description)
		}
		for _, m := range cps {
			problems = append(problems, fmt.Sprintf("contract %s: checkpoint at %d, %d records priced", m.ContractID, m.Position, m.Priced))
		}
		for _, p := range problems {
			logger.Error("verify: mismatch", "event", "verify_mismatch", "job", r.Job, "slot", r.Slot, "mismatch", p)
		}
		if onResult != nil {
			onResult(len(problems))
		}
		logger.Info("verify: done", "event", "verify_done", "job", r.Job, "contracts", sum.Contracts,
			"records", sum.Records, "priced", sum.Priced, "mismatches", len(problems))
		if len(problems) > 0 {
			shown := problems
			if len(shown) > 5 {
				shown = append(shown[:5:5], fmt.Sprintf("and %d more", len(problems)-5))
			}
			return fmt.Errorf("verify: %d mismatch(es): %s", len(problems), strings.Join(shown, "; "))
		}
		return nil
	}
}
