package ingest

import (
	"os"
	"runtime/debug"
)

// HeapOverhead is the memory a load takes besides its records' budget
// (Options.MemoryLimit): read-ahead batches, connection buffers, the
// runtime.
const HeapOverhead = 64 << 20

// LimitHeap sets the Go runtime's soft memory limit for a process whose
// load takes budget bytes for its records (unless GOMEMLIMIT sets one): the
// budget and HeapOverhead, so that garbage left by the records written is
// collected before the process grows much beyond them.
func LimitHeap(budget int64) {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(budget + HeapOverhead)
	}
}
