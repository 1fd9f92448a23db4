package progress

import (
	"strings"
	"testing"
	"time"
)

// The progress of a load is drawn only on a terminal, and not among JSON
// logs; scripts and pipes get the summary alone.
func TestLoadProgressShown(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		terminal bool
		format   string
		want     bool
	}{
		{true, "text", true},
		{true, "TEXT", true},
		{true, "json", false},
		{false, "text", false},
		{false, "json", false},
	} {
		if got := Shown(c.terminal, c.format); got != c.want {
			t.Errorf("Shown(terminal %v, --log-format %s) = %v, want %v", c.terminal, c.format, got, c.want)
		}
	}
	var b strings.Builder
	p := NewLoad(&b, "loading", "text") // not a terminal
	p.Update("records", 100)
	p.Reading(100, 10, 100)
	p.Done()
	if b.Len() != 0 {
		t.Fatalf("progress written to a pipe: %q", b.String())
	}
}

// A records file's progress line: rows read, the share of the file read
// when its size is known, and once a second has passed the rate and the
// time left at that rate.
func TestReadingLine(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		rows, read, size int64
		elapsed          time.Duration
		want             string
	}{
		{0, 0, 1000, 0, "loading: reading records: 0 rows (0%)"},
		{950, 4096, 1 << 20, 500 * time.Millisecond, "loading: reading records: 950 rows (0%)"},
		{3_200_000, 45, 100, 4 * time.Second, "loading: reading records: 3,200,000 rows (45%), 800,000 rows/s, 5s left"},
		{12_345_678, 60 << 20, 0, 10 * time.Second, "loading: reading records: 12,345,678 rows, 1,234,567 rows/s"},
		{1000, 100, 100, 2 * time.Second, "loading: reading records: 1,000 rows (100%), 500 rows/s"},
	} {
		if got := ReadingLine("loading", c.rows, c.read, c.size, c.elapsed); got != c.want {
			t.Errorf("ReadingLine(%d rows, %d of %d bytes, %s) = %q, want %q", c.rows, c.read, c.size, c.elapsed, got, c.want)
		}
	}
}
