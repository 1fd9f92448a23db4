package text_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/demo"
	"github.com/batonhq/baton/internal/report/text"
	"github.com/batonhq/baton/partition"
)

var _ demo.View = (*text.DemoView)(nil)

// The demo's view counts what the partitions it is given have priced and
// shows its notes.
func TestDemoView(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	v := text.NewDemoView(&b)
	v.Draw([]partition.PartitionStatus{{Key: "c-1", State: "active", Processed: 5}}, nil, 10, time.Second)
	v.Note("worker 2 killed")
	for _, want := range []string{"5/10 priced", "worker 2 killed"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the view lacks %q:\n%s", want, b.String())
		}
	}
}
