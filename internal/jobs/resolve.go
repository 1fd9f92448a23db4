package jobs

import (
	"log/slog"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/metrics"
	"github.com/batonhq/baton/schedule"
)

// Conns is how many more connections a worker needs to run jobs.
func Conns(enabled bool) int {
	if enabled {
		return 3
	}
	return 0
}

// Resolve resolves the jobs a worker runs beside the distributor: a
// command, or the built-in verify job. m, if set, gets the verify job's
// mismatch count.
func Resolve(db *dbconn.DB, schemaName string, logger *slog.Logger, m *metrics.Metrics) func(schedule.Definition) (schedule.RunFunc, bool) {
	var onVerify func(int)
	if m != nil {
		onVerify = m.SetVerifyMismatches
	}
	return func(d schedule.Definition) (schedule.RunFunc, bool) {
		switch {
		case len(d.Command) > 0:
			return schedule.Command(d.Command, 0, logger), true
		case d.Builtin == VerifyBuiltin:
			return Verify(db, schemaName, logger, onVerify), true
		default:
			return nil, false // a built-in this binary does not know
		}
	}
}
