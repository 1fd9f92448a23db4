package main

import (
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Flag range annotations, checked for every command before it runs, so that
// a zero or negative value is refused with a message naming the flag
// instead of being replaced by a default or reaching a library's own
// wording.
const (
	annotPositive    = "baton_positive"     // must be > 0
	annotNonNegative = "baton_non_negative" // must be ≥ 0 (0 has a documented meaning)
)

// positive marks flags whose value must be greater than zero.
func positive(f *pflag.FlagSet, names ...string) { annotate(f, annotPositive, names) }

// nonNegative marks flags whose value must not be negative.
func nonNegative(f *pflag.FlagSet, names ...string) { annotate(f, annotNonNegative, names) }

func annotate(f *pflag.FlagSet, key string, names []string) {
	for _, n := range names {
		if err := f.SetAnnotation(n, key, []string{"true"}); err != nil {
			panic(err) // a flag name typo in this binary
		}
	}
}

// checkFlagRanges checks the annotated flags of cmd.
func checkFlagRanges(cmd *cobra.Command) error {
	var err error
	cmd.Flags().VisitAll(func(fl *pflag.Flag) {
		if err != nil {
			return
		}
		_, pos := fl.Annotations[annotPositive]
		_, nonNeg := fl.Annotations[annotNonNegative]
		if !pos && !nonNeg {
			return
		}
		sign, ok := flagSign(fl)
		if !ok {
			return
		}
		switch {
		case pos && sign <= 0:
			err = usageError("--%s must be greater than zero, got %s", fl.Name, fl.Value.String())
		case nonNeg && sign < 0:
			err = usageError("--%s must not be negative, got %s", fl.Name, fl.Value.String())
		}
	})
	return err
}

// flagSign returns -1, 0 or 1 for a numeric or duration flag's value.
func flagSign(fl *pflag.Flag) (int, bool) {
	s := fl.Value.String()
	sign := func(neg, zero bool) int {
		switch {
		case neg:
			return -1
		case zero:
			return 0
		}
		return 1
	}
	switch fl.Value.Type() {
	case "duration":
		d, err := time.ParseDuration(s)
		return sign(d < 0, d == 0), err == nil
	case "int", "int64", "int32":
		n, err := strconv.ParseInt(s, 10, 64)
		return sign(n < 0, n == 0), err == nil
	case "float64", "float32":
		x, err := strconv.ParseFloat(s, 64)
		return sign(x < 0, x == 0), err == nil
	case "uint", "uint64", "uint32":
		n, err := strconv.ParseUint(s, 10, 64)
		return sign(false, n == 0), err == nil
	}
	return 0, false
}
