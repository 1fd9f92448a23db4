package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/pricer"
	"github.com/batonhq/baton/schedule"
)

// verifyBuiltin is the name of the built-in consistency-check job.
const verifyBuiltin = "verify"

// verifyJob is the built-in "verify" job: it recomputes every contract's
// totals independently in SQL (pricer.Verify), compares them with the priced
// output and the checkpoints (pricer.VerifyCheckpoints), logs every mismatch
// (event verify_mismatch), reports the count to onResult (for a metric; may
// be nil), and fails the run, naming the mismatches, if there is any.
func verifyJob(db bun.IDB, schemaName string, logger *slog.Logger, onResult func(mismatches int)) schedule.RunFunc {
	return func(ctx context.Context, r *schedule.Run) error {
		sum, err := pricer.Verify(ctx, db, schemaName)
		if err != nil {
			return err
		}
		cps, err := pricer.VerifyCheckpoints(ctx, db, schemaName)
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
