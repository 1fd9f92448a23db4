package console

import (
	"context"
	"errors"
	"fmt"

	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/schedule"
)

func (s *source) jobs(ctx context.Context) ([]schedule.Status, error) {
	return schedule.NewStore(s.db, s.cfg.Schema).List(ctx)
}

// trigger asks for one extra run of a job now, as "worker schedule
// trigger" does. It reports false for an unknown job.
func (s *source) trigger(ctx context.Context, name string) (bool, error) {
	_, err := schedule.NewStore(s.db, s.cfg.Schema).Trigger(ctx, name)
	if errors.Is(err, partition.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("triggering job %s: %w", name, err)
	}
	return true, nil
}
