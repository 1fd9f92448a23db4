package seed

import "fmt"

// Summary says what WriteFiles wrote for o to the files tiers and records,
// as "worker seed" prints it.
func (o Options) Summary(tiers, records string) string {
	if o.Shape.Kind == Uniform {
		return fmt.Sprintf("wrote %s and %s (%d contracts × %d records, seed %d)",
			tiers, records, o.Contracts, o.RecordsPerContract, o.Seed)
	}
	return fmt.Sprintf("wrote %s and %s (%d contracts, %d records shaped %s, seed %d)",
		tiers, records, o.Contracts, o.Records(), o.Shape, o.Seed)
}
