package report

import (
	"context"
	"fmt"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/schema"
)

// Generations counts the contracts between two generations of their
// priced output (package rerate): those being re-priced, whose readers see
// the previous generation until the new one catches up, and the previews
// waiting for "worker generations approve" or "discard", which change
// nothing until then.
type Generations struct {
	Repricing       int64 `json:"repricing"`
	PreviewsWaiting int64 `json:"previews_waiting"`
}

// readGenerationsSQL counts the generations being priced and the previews.
const readGenerationsSQL = `SELECT count(*) FILTER (WHERE state = 'pricing'), count(*) FILTER (WHERE state = 'preview')
  FROM {{.Schema}}.generations WHERE state IN ('pricing', 'preview')`

// ReadGenerations sets s.Generations.
func ReadGenerations(ctx context.Context, db *dbconn.DB, schemaName string, s *Status) error {
	var g Generations
	if err := db.QueryRowContext(ctx, schema.SQL(schemaName, readGenerationsSQL)).Scan(&g.Repricing, &g.PreviewsWaiting); err != nil {
		return fmt.Errorf("counting the generations being priced and previewed: %w", err)
	}
	s.Generations = &g
	return nil
}
