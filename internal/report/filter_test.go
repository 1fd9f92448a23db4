package report

import (
	"slices"
	"testing"
)

// A filter keeps the contracts of the states asked for, cuts them to the
// limit counting what it left out, and refuses a state never reported.
func TestFilter(t *testing.T) {
	t.Parallel()
	s := Status{Partitions: []Contract{{ContractID: "a", State: "active"}, {ContractID: "b", State: "done"},
		{ContractID: "c", State: "active"}, {ContractID: "d", State: "quarantined"}}}
	Filter{States: []string{"active", "quarantined"}, Limit: 2}.Apply(&s)
	var ids []string
	for _, p := range s.Partitions {
		ids = append(ids, p.ContractID)
	}
	if !slices.Equal(ids, []string{"a", "c"}) || s.Unlisted != 1 {
		t.Fatalf("filtered to %v, %d unlisted; want [a c], 1", ids, s.Unlisted)
	}
	if err := (Filter{States: []string{StateInconsistent, "done"}}).Validate(); err != nil {
		t.Fatalf("known states refused: %v", err)
	}
	if err := (Filter{States: []string{"finished"}}).Validate(); err == nil {
		t.Fatal("an unknown state was accepted")
	}
}
