package ingest

import (
	"fmt"
	"io"
	"time"

	"github.com/batonhq/baton/internal/noun"
)

// WriteSummary writes the load's report as "worker load" prints it: what
// it created, accepted, skipped and rejected, in how long (and at what
// rate, when it means something: Rate); with o.Reprice or o.Amend what it
// amended and re-prices; with rejected rows, where they went.
func (r Report) WriteSummary(w io.Writer, o Options) {
	rate := ""
	if perSecond, ok := r.Rate(); ok {
		rate = fmt.Sprintf(" (%.0f records/s)", perSecond)
	}
	fmt.Fprintf(w, "load %d: %s, %s created, %s accepted, %d re-delivered (skipped), %d rejected in %s%s\n",
		r.LoadID, noun.Count(r.TierRows, "tier row", "tier rows"), noun.Count(r.ContractsCreated, "contract", "contracts"),
		noun.Count(r.RecordsAccepted, "record", "records"), r.RecordsRedelivered, r.RowsRejected,
		r.Duration.Round(time.Millisecond), rate)
	if o.Reprice || o.Amend {
		fmt.Fprintf(w, "load %d: %s amended, %s re-pricing (see worker generations)\n", r.LoadID,
			noun.Count(r.RecordsAmended, "record", "records"), noun.Count(r.ContractsRepriced, "contract", "contracts"))
	}
	if r.RowsRejected > 0 {
		fmt.Fprintf(w, "rejected rows and their reasons: %s\n", o.RejectPath)
	}
}
