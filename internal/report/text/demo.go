package text

import (
	"io"
	"time"

	"github.com/batonhq/baton/internal/report"
	"github.com/batonhq/baton/partition"
)

// DemoView shows the pricing demo (its demo.View) on a live view.
type DemoView struct{ live *Live }

// NewDemoView returns the demo's view drawn on w.
func NewDemoView(w io.Writer) *DemoView { return &DemoView{NewLive(w)} }

// Draw shows the partitions and workers read, folded into contracts.
func (v *DemoView) Draw(parts []partition.PartitionStatus, workers []partition.WorkerStatus, total int64, elapsed time.Duration) {
	v.live.Draw(report.Build(parts, workers), total, elapsed)
}

// Note shows a line about what just happened.
func (v *DemoView) Note(line string) { v.live.Note(line) }
