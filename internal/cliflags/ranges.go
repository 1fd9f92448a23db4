// Package cliflags is what the worker command's flags share beyond cobra:
// range annotations, checked before a command runs so that a zero or
// negative value is refused naming the flag (ranges.go); --help listing a
// command's flags in titled groups (groups.go); and the flags several
// commands take, defined once: a worker's distributor settings
// (distributor.go), its ownership history, the console, the drain target
// and the horizon warning (shared.go).
package cliflags

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Flag range annotations, checked for every command before it runs, so that
// a zero or negative value is refused with a message naming the flag
// instead of being replaced by a default or reaching a library's own
// wording. Every numeric or duration flag carries one of them (a test walks
// the command tree to make sure); a flag that takes 0 says in its help what
// 0 means.
const (
	annotPositive    = "baton_positive"     // must be > 0
	annotNonNegative = "baton_non_negative" // must be ≥ 0 (0 has a documented meaning)
	annotMin         = "baton_min"          // must be ≥ the annotation's value (and > 0)
	annotAnyValue    = "baton_any_value"    // every value the type takes is meaningful (a seed)
)

// Positive marks flags whose value must be greater than zero.
func Positive(f *pflag.FlagSet, names ...string) { annotate(f, annotPositive, names, "true") }

// NonNegative marks flags whose value must not be negative; their help says
// what 0 means.
func NonNegative(f *pflag.FlagSet, names ...string) { annotate(f, annotNonNegative, names, "true") }

// AtLeast marks a flag whose value must be at least min (a number or a
// duration, as the flag takes it; min itself is Positive).
func AtLeast(f *pflag.FlagSet, name, min string) { annotate(f, annotMin, []string{name}, min) }

// AnyValue marks flags for which every value of their type is meaningful.
func AnyValue(f *pflag.FlagSet, names ...string) { annotate(f, annotAnyValue, names, "true") }

func annotate(f *pflag.FlagSet, key string, names []string, value string) {
	for _, n := range names {
		if err := f.SetAnnotation(n, key, []string{value}); err != nil {
			panic(err) // a flag name typo in this binary
		}
	}
}

// Check checks the annotated flags of cmd that were given on the
// command line (defaults are this binary's own, and a default of 0 may mean
// "not given", as for schedule add's --every).
func Check(cmd *cobra.Command) error {
	var err error
	cmd.Flags().VisitAll(func(fl *pflag.Flag) {
		if err != nil || !fl.Changed {
			return
		}
		_, pos := fl.Annotations[annotPositive]
		_, nonNeg := fl.Annotations[annotNonNegative]
		minv, hasMin := fl.Annotations[annotMin]
		if !pos && !nonNeg && !hasMin {
			return
		}
		v, ok := flagNumber(fl)
		if !ok {
			return
		}
		if math.IsNaN(v) {
			err = fmt.Errorf("--%s must be a number, got %s", fl.Name, fl.Value.String())
			return
		}
		switch {
		case hasMin:
			m, _ := parseNumber(fl.Value.Type(), minv[0])
			if v < m {
				err = fmt.Errorf("--%s must be at least %s, got %s", fl.Name, minv[0], fl.Value.String())
			}
		case pos && v <= 0:
			err = fmt.Errorf("--%s must be greater than zero, got %s", fl.Name, fl.Value.String())
		case nonNeg && v < 0:
			err = fmt.Errorf("--%s must not be negative, got %s", fl.Name, fl.Value.String())
		}
	})
	return err
}

// Annotated reports whether fl carries a range annotation.
func Annotated(fl *pflag.Flag) bool {
	for _, a := range []string{annotPositive, annotNonNegative, annotMin, annotAnyValue} {
		if _, ok := fl.Annotations[a]; ok {
			return true
		}
	}
	return false
}

// Numeric reports whether a flag of this type takes a number or a
// duration.
func Numeric(typ string) bool {
	switch typ {
	case "duration", "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64",
		"float32", "float64":
		return true
	}
	return false
}

// flagNumber returns a numeric or duration flag's value as a float64
// (durations in nanoseconds).
func flagNumber(fl *pflag.Flag) (float64, bool) {
	return parseNumber(fl.Value.Type(), fl.Value.String())
}

func parseNumber(typ, s string) (float64, bool) {
	switch typ {
	case "duration":
		d, err := time.ParseDuration(s)
		return float64(d), err == nil
	case "int", "int8", "int16", "int32", "int64":
		n, err := strconv.ParseInt(s, 10, 64)
		return float64(n), err == nil
	case "uint", "uint8", "uint16", "uint32", "uint64":
		n, err := strconv.ParseUint(s, 10, 64)
		return float64(n), err == nil
	case "float32", "float64":
		x, err := strconv.ParseFloat(s, 64)
		return x, err == nil
	}
	return 0, false
}
