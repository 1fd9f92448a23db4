package report

import (
	"time"

	"github.com/batonhq/baton/partition"
)

// Paused is a pause in force of the pricing kind: of one contract, or of
// every contract when ContractID is null.
type Paused struct {
	ContractID *string   `json:"contract_id"` // null: the whole kind
	Kind       string    `json:"kind"`
	Since      time.Time `json:"since"`
	AgeMS      int64     `json:"age_ms"` // since Since, by the database's clock at the read
	By         string    `json:"by"`
	Reason     string    `json:"reason"`
}

// buildPaused shapes the pauses read at now (the database's clock).
func buildPaused(ps []partition.Pause, now time.Time) []Paused {
	out := make([]Paused, 0, len(ps))
	for _, p := range ps {
		out = append(out, Paused{ContractID: strPtr(p.Key), Kind: p.Kind, Since: p.Since,
			AgeMS: max(0, now.Sub(p.Since).Milliseconds()), By: p.By, Reason: p.Reason})
	}
	return out
}
