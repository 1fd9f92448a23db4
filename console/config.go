package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/batonhq/baton/horizon"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/schema"
)

// Defaults. Each Config field documents its own.
// StateInconsistent is the state shown for a partition that
// Config.Inconsistent names.
const StateInconsistent = "inconsistent"

const (
	AddrDefault     = "127.0.0.1:8080"
	RefreshDefault  = 2 * time.Second
	TokenEnv        = "BATON_UI_TOKEN"
	minTokenLength  = 8
	historyLimit    = 500
	tableLimit      = 1000
	recentTakeovers = time.Hour
	notableLimit    = 20
	NounDefault     = "partition"
	ItemUnitDefault = "items"
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
	// events, and the sampling interval for items/s. Defaults to 2s.
	Refresh time.Duration
	// Noun names one partition on the pages, e.g. "contract". Defaults to
	// "partition".
	Noun string
	// Nouns is Noun's plural, e.g. "contracts": the pages' titles and the
	// path of the list (/contracts) and of each one (/contracts/{key}).
	// Lower-case letters, digits, '-' and '_'; not a path the console uses
	// otherwise (workers, jobs, events, api, static). Defaults to Noun + "s".
	Nouns string
	// ItemUnit names the work items counted in a partition's progress, lag
	// and rate, e.g. "records". Defaults to "items".
	ItemUnit string
	// Kind is the kind of the partitions shown (the processor's, as in
	// distributor.Config.Kind), e.g. "pricing": the pages list, count and
	// act on that kind's partitions, workers and events only. Defaults to
	// partition.DefaultKind.
	Kind string
	// Inconsistent, if set, names the partitions the workload finds
	// inconsistent, with the problem (for pricing: a checkpoint beyond the
	// contract's stored records): the pages show them in state
	// "inconsistent", an error, never as done. Called at each refresh.
	Inconsistent func(ctx context.Context) (map[string]string, error)
	// Generations, if set, returns the generations of a partition's output
	// (see partition.Store.Rewind), newest first, for its page: for
	// pricing, each re-pricing of a contract with its reason and totals.
	// Nil (the default) shows none; a partition never rewound may return
	// none.
	Generations func(ctx context.Context, key string) ([]Generation, error)
	// Previews, if set, returns the previews waiting for a decision, by
	// key: the overview counts them and lists each one's change, read
	// only (for pricing, "worker generations approve|discard" decides).
	// Nil (the default) shows none.
	Previews func(ctx context.Context) ([]Preview, error)
	// HorizonWarnAfter is the age of the oldest transaction holding back
	// the xmin horizon past which the overview's vacuum section is
	// highlighted as a warning (package horizon). Defaults to
	// horizon.WarnAfterDefault (10m).
	HorizonWarnAfter time.Duration
	// DrainTarget is the time the backlog section's workers needed drains
	// the backlog within. Defaults to backlog.DrainTargetDefault (15m).
	DrainTarget time.Duration
	// Clock defaults to the real clock.
	Clock clockwork.Clock
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	c.Addr = cmp.Or(c.Addr, AddrDefault)
	c.Refresh = cmp.Or(c.Refresh, RefreshDefault)
	if c.Noun == "" {
		c.Noun, c.Nouns = NounDefault, cmp.Or(c.Nouns, NounDefault+"s")
	}
	c.Nouns = cmp.Or(c.Nouns, c.Noun+"s")
	c.ItemUnit = cmp.Or(c.ItemUnit, ItemUnitDefault)
	c.Kind = cmp.Or(c.Kind, partition.DefaultKind)
	c.HorizonWarnAfter = cmp.Or(c.HorizonWarnAfter, horizon.WarnAfterDefault)
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
	if err := partition.ValidateKind(c.Kind); err != nil {
		errs = append(errs, fmt.Errorf("console kind: %w", err))
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		errs = append(errs, fmt.Errorf("console address %q: %w", c.Addr, err))
	}
	if c.Token != "" && len(c.Token) < minTokenLength {
		errs = append(errs, fmt.Errorf("console token must be at least %d characters", minTokenLength))
	}
	if !pathNoun.MatchString(c.Nouns) || slices.Contains(reservedPaths, c.Nouns) {
		errs = append(errs, fmt.Errorf("console noun %q: the plural is a path: lower-case letters, digits, '-' and '_', and none of %v", c.Nouns, reservedPaths))
	}
	if c.Noun != strings.TrimSpace(c.Noun) || c.ItemUnit != strings.TrimSpace(c.ItemUnit) {
		errs = append(errs, errors.New("console noun and item unit must not start or end with spaces"))
	}
	if c.HorizonWarnAfter < 0 {
		errs = append(errs, fmt.Errorf("console horizon warning threshold %s is negative", c.HorizonWarnAfter))
	}
	if c.Refresh < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("console refresh %s is below 100ms", c.Refresh))
	}
	return errors.Join(errs...)
}

// pathNoun is what the plural noun may be: it is the list's path.
var pathNoun = regexp.MustCompile(`^[a-z][a-z0-9_-]*$`)

// reservedPaths are the console's other first path segments.
var reservedPaths = []string{"api", "events", "jobs", "static", "workers"}

// Validate applies defaults to a copy of c and reports invalid settings.
func (c Config) Validate() error {
	c.setDefaults()
	return c.validate()
}
