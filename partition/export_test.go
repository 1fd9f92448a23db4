package partition

import (
	"time"

	"github.com/batonhq/baton/schema"
)

// StatementSQL is the text of a coordination statement as sent, over the
// default schema, for tests that explain its plans.
func StatementSQL(name string) string {
	q := map[string]string{
		"Candidates": candidatesSQL, "StaleCandidates": staleCandidatesSQL,
		"Heartbeat": heartbeatSQL, "FairShareLoad": fairShareSQL,
	}[name]
	return schema.SQL(schema.Default, q)
}

// SetFloorMargin sets s's FloorMargin, for tests that cannot wait ten
// seconds for a floor to pass a row.
func SetFloorMargin(s *Store, d time.Duration) {
	s.floor.mu.Lock()
	defer s.floor.mu.Unlock()
	s.floor.margin = d
}

// FloorArg is the floor s's reads of the claimable rows start from now,
// as passed to the statements ("-infinity": from the beginning).
func FloorArg(s *Store) string { return s.floor.current() }

// FullReadEvery is how often a Store reads the claimable rows from the
// beginning all the same.
const FullReadEvery = fullReadEvery
