package main

import (
	"strings"
	"testing"
)

// worker run --help shows the flags most runs need first, then the
// operating ones, then the tuning knobs; every flag is shown once.
func TestRunHelpGroupsItsFlags(t *testing.T) {
	t.Parallel()
	out, _, code := cli{t: t}.run("run", "--help")
	if code != 0 {
		t.Fatalf("run --help: exit %d\n%s", code, out)
	}
	need := strings.Index(out, "Flags most runs need:")
	tuning := strings.Index(out, "Tuning (the defaults suit most fleets):")
	id, batch := strings.Index(out, "      --id string"), strings.Index(out, "      --batch-size int")
	if need < 0 || tuning < need || id < need || id > tuning || batch < tuning {
		t.Fatalf("run --help does not group its flags (needed at %d, tuning at %d, --id at %d, --batch-size at %d):\n%s", need, tuning, id, batch, out)
	}
	for _, flag := range []string{"      --id ", "      --until-done", "      --heartbeat ", "      --metrics-addr ", "      --log-format ", "      --database-url "} {
		if n := strings.Count(out, flag); n != 1 {
			t.Errorf("run --help shows %s %d times, want once", flag, n)
		}
	}
}
