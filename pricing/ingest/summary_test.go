package ingest

import (
	"strings"
	"testing"
	"time"
)

// A load's summary takes the noun's number, shows a rate only when it
// means something, and the amendments and rejects only when there are.
func TestWriteSummary(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	Report{LoadID: 3, TierRows: 1, ContractsCreated: 2, RecordsAccepted: 1, Duration: 1500 * time.Microsecond}.WriteSummary(&b, Options{})
	if want := "load 3: 1 tier row, 2 contracts created, 1 record accepted, 0 re-delivered (skipped), 0 rejected in 2ms\n"; b.String() != want {
		t.Fatalf("small load:\n got %q\nwant %q", b.String(), want)
	}
	b.Reset()
	Report{LoadID: 4, RecordsAccepted: 4000, RowsRejected: 2, RecordsAmended: 1, ContractsRepriced: 1, Duration: 2 * time.Second}.
		WriteSummary(&b, Options{Amend: true, RejectPath: "bad.csv"})
	want := "load 4: 0 tier rows, 0 contracts created, 4000 records accepted, 0 re-delivered (skipped), 2 rejected in 2s (2000 records/s)\n" +
		"load 4: 1 record amended, 1 contract re-pricing (see worker generations)\n" +
		"rejected rows and their reasons: bad.csv\n"
	if b.String() != want {
		t.Fatalf("amending load:\n got %q\nwant %q", b.String(), want)
	}
}
