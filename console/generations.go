package console

import "time"

// Generation is one generation of a partition's output as the workload
// keeps it (Config.Generations): for pricing, one pricing of a contract.
type Generation struct {
	Generation int64
	// State is the workload's word for it: for pricing "pricing" (being
	// written, readers see the one before), "current", "superseded" or
	// "abandoned".
	State      string
	StartedAt  time.Time
	FinishedAt *time.Time // became current, or was abandoned; nil while in progress
	StartedBy  string
	Reason     string
	// Items is how many items the generation covers (for pricing, priced
	// records), and Total its total in the workload's unit (for pricing,
	// the net in minor units); nil where the workload does not know yet.
	Items, Total *int64
}

// generationRow is a Generation with the change of its total from the
// generation before it, as the page shows it.
type generationRow struct {
	Generation
	Change *int64
}

// generationRows pairs each generation (newest first) with the change of
// its total from the next older one that has a total.
func generationRows(gens []Generation) []generationRow {
	rows := make([]generationRow, len(gens))
	for i, g := range gens {
		rows[i].Generation = g
		if g.Total == nil {
			continue
		}
		for _, older := range gens[i+1:] {
			if older.Total != nil {
				d := *g.Total - *older.Total
				rows[i].Change = &d
				break
			}
		}
	}
	return rows
}

// Preview is a new generation of a partition's output that waits for an
// operator's decision before it replaces the current one
// (Config.Previews): for pricing, a re-pricing priced as a preview.
type Preview struct {
	Key        string
	Generation int64
	// CaughtUp says it has processed every item; until then Total is what
	// it has so far.
	CaughtUp bool
	// Total is its total in the workload's unit, Change the change from
	// the current generation's.
	Total, Change int64
}
