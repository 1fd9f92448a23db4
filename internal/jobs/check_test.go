package jobs

import (
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/schedule"
)

// Check words what is wrong in the command line's terms.
func TestCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		d    schedule.Definition
		want string // "" for none
	}{
		{schedule.Definition{Name: "nightly", Cron: "0 3 * * *", Builtin: VerifyBuiltin}, ""},
		{schedule.Definition{Name: "tick", Every: time.Minute, Command: []string{"true"}}, ""},
		{schedule.Definition{Name: "both", Every: time.Minute, Cron: "* * * * *", Command: []string{"true"}}, "--every and --cron"},
		{schedule.Definition{Name: "bad name!", Every: time.Minute, Command: []string{"true"}}, "NAME \"bad name!\""},
		{schedule.Definition{Name: "idle", Every: time.Minute}, "schedule add idle: give a command after -- or --builtin"},
		{schedule.Definition{Name: "x", Every: time.Minute, Builtin: "nosuch"}, `--builtin "nosuch": no such built-in job (known: verify)`},
	} {
		err := Check(tc.d)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("Check(%+v) = %v", tc.d, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("Check(%+v) = %v, want %q", tc.d, err, tc.want)
		}
	}
}
