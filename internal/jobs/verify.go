// Package jobs is the scheduled jobs a pricing worker knows (package
// schedule runs them): a command, or the built-in verify job, which checks
// the committed prices against an independent recomputation.
package jobs

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/pricing/pricer"
	"github.com/batonhq/baton/schedule"
)

// VerifyBuiltin is the name of the built-in consistency-check job.
const VerifyBuiltin = "verify"

// Verify is the built-in "verify" job: in one snapshot (a read-only
// REPEATABLE READ transaction, so checkpoints and output agree while
// workers price), it checks every contract's committed output against its
// checkpoint and an independent SQL recomputation (pricer.Store.VerifyCommitted),
// logs every mismatch (event verify_mismatch), reports the count to
// onResult (for a metric; may be nil), and fails the run, naming the
// mismatches, if there is any. The worker's statement timeout does not
// apply (a check of a large database takes a while); the run's
// lock-at-most-for bounds it.
func Verify(db *dbconn.DB, schemaName string, logger *slog.Logger, onResult func(mismatches int)) schedule.RunFunc {
	return func(ctx context.Context, r *schedule.Run) error {
		var found []pricer.CommittedMismatch
		var inFlight []string
		err := db.RunInTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true},
			func(ctx context.Context, tx bun.Tx) error {
				if _, err := tx.ExecContext(ctx, `SET LOCAL statement_timeout = 0`); err != nil {
					return err
				}
				var err error
				tables := pricer.NewStore(db, schemaName)
				if inFlight, err = tables.GenerationsInFlightTx(ctx, tx); err != nil {
					return err
				}
				found, err = tables.VerifyCommittedTx(ctx, tx)
				return err
			})
		if err != nil {
			return fmt.Errorf("verify: %w", err)
		}
		problems := make([]string, 0, len(found))
		for _, m := range found {
			problems = append(problems, m.String())
		}
		for _, p := range problems {
			logger.Error("verify: mismatch", "event", "verify_mismatch", "job", r.Job, "slot", r.Slot, "mismatch", p)
		}
		if onResult != nil {
			onResult(len(problems))
		}
		if len(inFlight) > 0 {
			// Their checkpoints are the new generation's, their output the
			// previous one's: checked once the new one is current.
			logger.Info("verify: skipped contracts being re-priced", "event", "verify_skipped", "job", r.Job,
				"contracts", len(inFlight), "first_contract", inFlight[0])
		}
		logger.Info("verify: done", "event", "verify_done", "job", r.Job, "mismatches", len(problems), "skipped", len(inFlight))
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
