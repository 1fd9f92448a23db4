package faults

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// waitPrimarySince finds the keeper's first move from primary to
// wait_primary, not a later one from another state, nor a node that only
// heard of one.
func TestWaitPrimarySinceReadsTheKeepersLog(t *testing.T) {
	log := filepath.Join(t.TempDir(), "node1.log")
	lines := `07:02:07 16355 INFO  New state for node 2 "node2" (127.0.0.1:43645): secondary ➜ wait_primary
07:02:11 16355 INFO  Monitor assigned new state "wait_primary"
07:02:11 16355 INFO  FSM transition from "primary" to "wait_primary": Secondary became unhealthy
07:02:11 16355 INFO  Disabling synchronous replication
07:02:40 16355 INFO  FSM transition from "primary" to "wait_primary": Secondary became unhealthy
`
	if err := os.WriteFile(log, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	day := time.Date(2026, 11, 30, 23, 0, 0, 0, time.Local)
	n := &pafNode{name: "node1", proc: &pafProc{log: log}}
	if got, want := waitPrimarySince(n, day), time.Date(2026, 11, 30, 7, 2, 11, 0, time.Local); !got.Equal(want) {
		t.Fatalf("waitPrimarySince = %v, want %v", got, want)
	}
	if err := os.WriteFile(log, []byte(lines[:len(lines)/4]), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := waitPrimarySince(n, day); !got.IsZero() {
		t.Fatalf("waitPrimarySince = %v for a keeper that never went to wait_primary; want zero", got)
	}
}
