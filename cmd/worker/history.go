package main

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/cliflags"
)

// historyFlags configure the ownership history (the events table).
type historyFlags struct {
	events    bool
	retention time.Duration
}

func (h *historyFlags) register(f *pflag.FlagSet) {
	f.BoolVar(&h.events, "events", true, "record each contract's ownership history (claims, takeovers, releases, failures) for the console")
	f.DurationVar(&h.retention, "event-retention", distributor.EventRetentionDefault, "how long history events are kept (--events=false keeps none)")
	cliflags.Positive(f, "event-retention")
}

func (h *historyFlags) apply(cfg *distributor.Config) {
	cfg.DisableEvents = !h.events
	cfg.EventRetention = h.retention
}
