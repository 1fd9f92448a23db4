package cliflags

import (
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/batonhq/baton/distributor"
)

// The shared flags set the configuration they are given, default to the
// packages' own defaults, and every numeric one carries a range.
func TestSharedFlags(t *testing.T) {
	t.Parallel()
	f := pflag.NewFlagSet("run", pflag.ContinueOnError)
	var cfg distributor.Config
	var h History
	var c Console
	var drain time.Duration
	Distributor(f, &cfg)
	h.Register(f)
	c.Register(f, "ui-addr", "", "console address")
	DrainTarget(f, &drain)
	if cfg.Heartbeat != distributor.HeartbeatDefault || cfg.Mode != distributor.ModeLock || !h.Events {
		t.Fatalf("defaults: heartbeat %s, mode %q, events %v", cfg.Heartbeat, cfg.Mode, h.Events)
	}
	if err := f.Parse([]string{"--mode", "leader", "--id", "a", "--max-partitions", "7", "--events=false",
		"--ui-addr", ":8080", "--drain-target", "5m"}); err != nil {
		t.Fatal(err)
	}
	h.Apply(&cfg)
	if cfg.Mode != distributor.ModeLeader || cfg.Name != "a" || cfg.MaxPartitions != 7 || !cfg.DisableEvents ||
		c.Addr != ":8080" || drain != 5*time.Minute {
		t.Errorf("parsed: %+v, console %+v, drain %s", cfg, c, drain)
	}
	f.VisitAll(func(fl *pflag.Flag) {
		if Numeric(fl.Value.Type()) && !Annotated(fl) {
			t.Errorf("--%s has no range annotation", fl.Name)
		}
	})
}
