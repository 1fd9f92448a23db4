package horizon

import (
	"testing"
	"time"
)

// A view gives ages in milliseconds, marks the holders past the threshold,
// names the oldest, and never has a null list.
func TestView(t *testing.T) {
	t.Parallel()
	if v := (Report{}).View(); v.Holders == nil || v.Tables == nil || v.OldestAgeMS != nil || v.Oldest != "" {
		t.Fatalf("empty report's view: %+v", v)
	}
	since := time.Now()
	r := Report{WarnAfter: time.Minute, Tables: []Table{{Name: "tasks", Dead: 3}, {Name: "events", Dead: 4}},
		Holders: []Holder{{Kind: KindSession, PID: 7, Since: &since, Age: 2 * time.Minute}, {Kind: KindSlot, Name: "s", State: "inactive"},
			{Kind: KindSession, PID: 8, Since: &since, Age: time.Second}}}
	v := r.View()
	if v.OldestAgeMS == nil || *v.OldestAgeMS != 120000 || v.Oldest != "pid 7" || v.DeadRows != 7 || v.WarnAfterMS != 60000 {
		t.Fatalf("view: %+v", v)
	}
	if h := v.Holders; len(h) != 3 || !h[0].Over || h[1].AgeMS != nil || h[1].Over || h[2].Over || *h[2].AgeMS != 1000 {
		t.Fatalf("holders: %+v", h)
	}
}
