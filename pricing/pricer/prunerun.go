package pricer

import (
	"context"
	"time"
)

// Prune is "worker prune --load" and "--older-than": it prunes the loads
// named, or with none every load that finished more than olderThan ago
// and is not pruned yet (LoadsOlderThan), and sums up the outcome with its
// duration (NewPruneReport). Its report's Err says what was left.
func (s *Store) Prune(ctx context.Context, cfg PruneConfig, loads []int64, olderThan time.Duration) (PruneReport, error) {
	start := time.Now()
	if len(loads) == 0 {
		var err error
		if loads, err = s.LoadsOlderThan(ctx, olderThan); err != nil {
			return PruneReport{}, err
		}
	}
	res, err := s.PruneLoads(ctx, cfg, loads)
	return NewPruneReport(res, time.Since(start), cfg.DryRun), err
}
