package rerate

import (
	"strings"
	"testing"
	"time"
)

func TestPrunedWriteText(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	Pruned{Generations: 1, Rows: 3}.WriteText(&b, 48*time.Hour, false)
	Pruned{Generations: 2, Rows: 1}.WriteText(&b, 0, true)
	want := "pruned 1 generation and their 3 priced rows (replaced more than 48h0m0s ago)\n" +
		"would prune 2 generations and their 1 priced row (replaced more than 0s ago)\n"
	if b.String() != want {
		t.Errorf("WriteText wrote\n%s\nwant\n%s", b.String(), want)
	}
}
