package ingest

import "time"

// Rate is the load's records (accepted and re-delivered) per second, and
// whether the figure means something: only for a load of a second or more
// and 1,000 records or more, since connecting and committing dominate a
// shorter one.
func (r Report) Rate() (float64, bool) {
	records := r.RecordsAccepted + r.RecordsRedelivered
	if r.Duration < time.Second || records < 1000 {
		return 0, false
	}
	return float64(records) / r.Duration.Seconds(), true
}
