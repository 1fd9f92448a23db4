package cliflags

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/batonhq/baton/distributor"
)

// The distributor's flags land in its configuration, and the values it
// would refuse are refused in the flags' words.
func TestDistributorFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // part of CheckDistributor's error; empty for none
	}{
		{[]string{"--spread-takeovers", "-1s", "--mode", "leader"}, ""},
		{[]string{"--mode", "auto"}, `--mode must be lock or leader, got "auto"`},
		{[]string{"--mode", "leader", "--until-done"}, "--until-done needs --mode lock"},
		{[]string{"--id", "a#b"}, `--id "a#b" must not contain "#"`},
		{[]string{"--heartbeat", "1s", "--stale-after", "2s"}, "--stale-after (2s) must be at least 3 × --heartbeat (1s)"},
	} {
		var cfg distributor.Config
		f := pflag.NewFlagSet("run", pflag.ContinueOnError)
		Distributor(f, &cfg)
		if err := f.Parse(c.args); err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		err := CheckDistributor(cfg)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.args, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
		if c.want == "" && (cfg.SpreadTakeovers != -time.Second || cfg.Mode != distributor.ModeLeader) {
			t.Errorf("%v: parsed into %+v", c.args, cfg)
		}
	}
}
