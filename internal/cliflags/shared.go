package cliflags

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/batonhq/baton/backlog"
	"github.com/batonhq/baton/console"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/horizon"
)

// DrainTarget adds --drain-target to f.
func DrainTarget(f *pflag.FlagSet, d *time.Duration) {
	f.DurationVar(d, "drain-target", backlog.DrainTargetDefault,
		"the time the backlog should drain within: workers needed (status, metrics) is computed for it")
	Positive(f, "drain-target")
}

// HorizonWarnAfter adds --horizon-warn-after to f.
func HorizonWarnAfter(f *pflag.FlagSet, d *time.Duration) {
	f.DurationVar(d, "horizon-warn-after", horizon.WarnAfterDefault,
		"warn when a transaction has held back the xmin horizon (and so vacuum) this long")
	Positive(f, "horizon-warn-after")
}

// History are the flags of the ownership history (the events table).
type History struct {
	Events    bool
	Retention time.Duration
}

// Register adds --events and --event-retention to f.
func (h *History) Register(f *pflag.FlagSet) {
	f.BoolVar(&h.Events, "events", true, "record each contract's ownership history (claims, takeovers, releases, failures) for the console")
	f.DurationVar(&h.Retention, "event-retention", distributor.EventRetentionDefault, "how long history events are kept (--events=false keeps none)")
	Positive(f, "event-retention")
}

// Apply sets the history's fields of cfg.
func (h History) Apply(cfg *distributor.Config) {
	cfg.DisableEvents = !h.Events
	cfg.EventRetention = h.Retention
}

// Console are the flags of the operator console, served by "worker ui" or,
// with --ui-addr, by any "worker run".
type Console struct {
	Addr  string
	Token string
	// HorizonWarnAfter is the horizon warning threshold (the console's
	// vacuum section; for worker run, its metrics' too).
	HorizonWarnAfter time.Duration
}

// Register adds the console's address flag (addrFlag, with its default
// and help), --ui-token and --horizon-warn-after to f.
func (c *Console) Register(f *pflag.FlagSet, addrFlag, addrDefault, addrHelp string) {
	f.StringVar(&c.Addr, addrFlag, addrDefault, addrHelp)
	f.StringVar(&c.Token, "ui-token", "", "enable the console's actions (retry, trigger) behind this token, at least 8 characters; read-only without it. Prefer $"+console.TokenEnv+": other users can read a command line (ps)")
	HorizonWarnAfter(f, &c.HorizonWarnAfter)
}
