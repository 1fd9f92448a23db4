package ingest

import (
	"math"
	"runtime/debug"
	"testing"
)

// LimitHeap sets the budget and the overhead as the soft memory limit,
// unless GOMEMLIMIT sets one.
func TestLimitHeap(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	t.Setenv("GOMEMLIMIT", "")
	LimitHeap(32 << 20)
	if got := debug.SetMemoryLimit(-1); got != 32<<20+HeapOverhead {
		t.Errorf("limit %d, want %d", got, 32<<20+HeapOverhead)
	}
	debug.SetMemoryLimit(math.MaxInt64)
	t.Setenv("GOMEMLIMIT", "1GiB")
	LimitHeap(32 << 20)
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("with GOMEMLIMIT set, the limit became %d", got)
	}
}
