package partition

import "github.com/batonhq/baton/schema"

// StatementSQL is the text of a coordination statement as sent, over the
// default schema, for tests that explain its plans.
func StatementSQL(name string) string {
	q := map[string]string{
		"Candidates": candidatesSQL, "StaleCandidates": staleCandidatesSQL,
		"Heartbeat": heartbeatSQL, "FairShareLoad": fairShareSQL,
	}[name]
	return schema.SQL(schema.Default, q)
}
