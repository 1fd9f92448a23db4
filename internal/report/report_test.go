package report_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/report"
	"github.com/batonhq/baton/partition"
)

// Build sums the contracts up by state, leaves what is unknown out of the
// JSON as null, and keeps the stable field names.
func TestBuildTotalsAndJSON(t *testing.T) {
	age := 1500 * time.Millisecond
	s := report.Build([]partition.PartitionStatus{
		{Key: "a", Owner: "w1", OwnerInstance: "w1#ab", State: "active", Version: 3, HeartbeatAge: &age, Processed: 10, Pending: 5},
		{Key: "b", State: "done", Processed: 7},
		{Key: "c", State: "quarantined", Pending: 2, Attempts: 5, Error: "boom"},
	}, []partition.WorkerStatus{{InstanceID: "w1#ab", Name: "w1", Owned: 1}})
	if s.Totals.Partitions != 3 || s.Totals.Processed != 17 || s.Totals.Pending != 7 || s.Totals.LiveWorkers != 1 ||
		s.Totals.ByState["active"] != 1 || s.Totals.ByState["done"] != 1 || s.Totals.ByState["quarantined"] != 1 {
		t.Fatalf("totals: %+v", s.Totals)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"contract_id":"a","owner":"w1","owner_instance":"w1#ab"`, `"heartbeat_age_ms":1500`,
		`"contract_id":"b","owner":null`, `"error":"boom"`, `"live_workers":1`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON lacks %s:\n%s", want, b)
		}
	}
	if strings.Contains(string(b), `"horizon"`) {
		t.Errorf("a status built without its horizon shows one:\n%s", b)
	}
}
