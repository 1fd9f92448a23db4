package console

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/batonhq/baton/schema"
)

// Defaults. Each Config field documents its own.
const (
	AddrDefault     = "127.0.0.1:8080"
	RefreshDefault  = 2 * time.Second
	TokenEnv        = "BATON_UI_TOKEN"
	minTokenLength  = 8
	historyLimit    = 500
	tableLimit      = 1000
	recentTakeovers = time.Hour
)

// Config configures the console.
type Config struct {
	// Schema is the PostgreSQL schema holding baton's tables. Defaults to
	// schema.Default ("baton").
	Schema string
	// Addr is the listen address. Defaults to 127.0.0.1:8080 (loopback).
	Addr string
	// Token enables the actions (retry, trigger) and is the secret every
	// action must carry. Empty (the default) makes the console read-only.
	// At least 8 characters.
	Token string
	// Refresh is how often live pages are refreshed over server-sent
	// events, and the sampling interval for records/s. Defaults to 2s.
	Refresh time.Duration
	// Clock defaults to the real clock.
	Clock clockwork.Clock
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	c.Addr = cmp.Or(c.Addr, AddrDefault)
	c.Refresh = cmp.Or(c.Refresh, RefreshDefault)
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func (c Config) validate() error {
	var errs []error
	if err := schema.Validate(c.Schema); err != nil {
		errs = append(errs, fmt.Errorf("invalid Schema: %w", err))
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		errs = append(errs, fmt.Errorf("console address %q: %w", c.Addr, err))
	}
	if c.Token != "" && len(c.Token) < minTokenLength {
		errs = append(errs, fmt.Errorf("console token must be at least %d characters", minTokenLength))
	}
	if c.Refresh < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("console refresh %s is below 100ms", c.Refresh))
	}
	return errors.Join(errs...)
}

// Validate applies defaults to a copy of c and reports invalid settings.
func (c Config) Validate() error {
	c.setDefaults()
	return c.validate()
}
