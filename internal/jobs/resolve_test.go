package jobs

import (
	"log/slog"
	"testing"

	"github.com/batonhq/baton/schedule"
)

// A worker runs a command job and the built-in verify job, and refuses a
// built-in it does not know; only a worker running jobs needs connections
// for them.
func TestResolve(t *testing.T) {
	t.Parallel()
	resolve := Resolve(nil, "", slog.Default(), nil)
	for _, c := range []struct {
		d    schedule.Definition
		want bool
	}{
		{schedule.Definition{Name: "cmd", Command: []string{"true"}}, true},
		{schedule.Definition{Name: "v", Builtin: VerifyBuiltin}, true},
		{schedule.Definition{Name: "x", Builtin: "vacuum"}, false},
	} {
		run, ok := resolve(c.d)
		if ok != c.want || (run != nil) != c.want {
			t.Errorf("%s: resolved %v (func %v), want %v", c.d.Name, ok, run != nil, c.want)
		}
	}
	if Conns(false) != 0 || Conns(true) <= 0 {
		t.Errorf("connections: %d without jobs, %d with", Conns(false), Conns(true))
	}
}
