package backlog

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/batonhq/baton/schema"
)

// Defaults of Config.
const (
	DrainTargetDefault   = 15 * time.Minute
	RateWindowDefault    = time.Minute
	MinRateWindowDefault = 10 * time.Second
	SampleEveryDefault   = 15 * time.Second
	// SampleKeep is how long stored samples are kept.
	SampleKeep = 2 * time.Hour
)

// Config says where the figures are read and how they are derived.
type Config struct {
	// Schema is baton's PostgreSQL schema. Defaults to schema.Default.
	Schema string
	// DrainTarget is the time WorkersNeeded drains the backlog within.
	// Defaults to DrainTargetDefault (15 minutes).
	DrainTarget time.Duration
	// RateWindow is how far back the rate looks. Defaults to
	// RateWindowDefault (one minute).
	RateWindow time.Duration
	// MinRateWindow is the shortest span a rate is computed over (a
	// younger fleet has no rate yet). Defaults to MinRateWindowDefault
	// (10 seconds); at most RateWindow.
	MinRateWindow time.Duration
	// SampleEvery is the interval between stored samples of a kind, and a
	// Publisher's interval. Defaults to SampleEveryDefault (15 seconds);
	// shorter than two RateWindows, or the rate would find no sample.
	SampleEvery time.Duration
	// Now, if set, is the time the figures are for instead of the
	// database clock (tests).
	Now func() time.Time
}

func (c *Config) setDefaults() {
	c.Schema = cmp.Or(c.Schema, schema.Default)
	c.DrainTarget = cmp.Or(c.DrainTarget, DrainTargetDefault)
	c.RateWindow = cmp.Or(c.RateWindow, RateWindowDefault)
	c.MinRateWindow = cmp.Or(c.MinRateWindow, min(MinRateWindowDefault, c.RateWindow))
	c.SampleEvery = cmp.Or(c.SampleEvery, SampleEveryDefault)
}

func (c *Config) validate() error {
	var errs []error
	if c.DrainTarget < 0 || c.RateWindow < 0 || c.MinRateWindow < 0 || c.SampleEvery < 0 {
		errs = append(errs, fmt.Errorf("negative duration (DrainTarget %s, RateWindow %s, MinRateWindow %s, SampleEvery %s)",
			c.DrainTarget, c.RateWindow, c.MinRateWindow, c.SampleEvery))
	}
	if c.MinRateWindow > c.RateWindow {
		errs = append(errs, fmt.Errorf("MinRateWindow %s is longer than RateWindow %s", c.MinRateWindow, c.RateWindow))
	}
	if c.SampleEvery >= 2*c.RateWindow {
		errs = append(errs, fmt.Errorf("SampleEvery %s leaves no sample within two RateWindows (%s)", c.SampleEvery, 2*c.RateWindow))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid backlog configuration: %w", err)
	}
	return nil
}
