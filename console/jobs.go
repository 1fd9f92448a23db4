package console

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// job is one scheduled job, read from the jobs table when it exists.
type job struct {
	Name         string
	Schedule     string
	Mode         string
	State        string
	Owner        string
	LastStarted  *time.Time
	LastFinished *time.Time
	NextRun      time.Time
	Runs         int64
	LastResult   string
	LastError    string
}

// jobsExist reports whether the scheduled-jobs table is there.
func (s *source) jobsExist(ctx context.Context) (bool, error) {
	var ok bool
	if err := s.db.QueryRowContext(ctx, `SELECT to_regclass('jobs') IS NOT NULL`).Scan(&ok); err != nil {
		return false, fmt.Errorf("looking for the jobs table: %w", err)
	}
	return ok, nil
}

func (s *source) jobs(ctx context.Context) ([]job, error) {
	rows, err := s.db.QueryContext(ctx, `
		SELECT name, coalesce(cron, (every_us || ' microseconds')::interval::text), mode, state,
		       coalesce(owner, ''), last_run_started, last_run_finished, next_run, runs,
		       coalesce(last_result, ''), coalesce(last_error, '')
		FROM jobs ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("reading jobs: %w", err)
	}
	defer rows.Close()
	var out []job
	for rows.Next() {
		var j job
		var started, finished sql.NullTime
		if err := rows.Scan(&j.Name, &j.Schedule, &j.Mode, &j.State, &j.Owner, &started, &finished,
			&j.NextRun, &j.Runs, &j.LastResult, &j.LastError); err != nil {
			return nil, fmt.Errorf("reading jobs: %w", err)
		}
		if started.Valid {
			j.LastStarted = &started.Time
		}
		if finished.Valid {
			j.LastFinished = &finished.Time
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

// trigger asks for a manual run of a job, as the scheduler's own trigger
// does: it sets trigger_at, and the job's owner runs it at its next look.
func (s *source) trigger(ctx context.Context, name string) (bool, error) {
	res, err := s.db.ExecContext(ctx, `UPDATE jobs SET trigger_at = now(), updated_at = now() WHERE name = ?`, name)
	if err != nil {
		return false, fmt.Errorf("triggering job %s: %w", name, err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}
