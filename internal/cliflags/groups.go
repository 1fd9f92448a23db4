package cliflags

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Group is a titled set of a command's flags, shown together in its
// --help so that the few flags most users need are not lost among tuning
// knobs.
type Group struct {
	Title string
	Names []string
}

// Grouped makes cmd's usage list its flags by group, in the groups'
// order; flags in no group follow under "Other flags", and the global
// flags last. A global flag named in a group is shown there instead.
func Grouped(cmd *cobra.Command, groups ...Group) {
	cmd.SetUsageFunc(func(c *cobra.Command) error {
		var b strings.Builder
		fmt.Fprintf(&b, "Usage:\n  %s\n", c.UseLine())
		if c.HasExample() {
			fmt.Fprintf(&b, "\nExamples:\n%s\n", c.Example)
		}
		shown := map[string]bool{"help": false}
		lookup := func(name string) *pflag.Flag {
			if f := c.LocalFlags().Lookup(name); f != nil {
				return f
			}
			return c.InheritedFlags().Lookup(name)
		}
		for _, g := range groups {
			fs := pflag.NewFlagSet(g.Title, pflag.ContinueOnError)
			fs.SortFlags = false // the group's own order: most needed first
			for _, n := range g.Names {
				if f := lookup(n); f != nil && !f.Hidden {
					fs.AddFlag(f)
					shown[n] = true
				}
			}
			if fs.HasAvailableFlags() {
				fmt.Fprintf(&b, "\n%s:\n%s", g.Title, fs.FlagUsages())
			}
		}
		for _, set := range []struct {
			title string
			fs    *pflag.FlagSet
		}{{"Other flags", c.LocalFlags()}, {"Global flags", c.InheritedFlags()}} {
			rest := pflag.NewFlagSet(set.title, pflag.ContinueOnError)
			set.fs.VisitAll(func(f *pflag.Flag) {
				if !shown[f.Name] && !f.Hidden {
					rest.AddFlag(f)
				}
			})
			if rest.HasAvailableFlags() {
				fmt.Fprintf(&b, "\n%s:\n%s", set.title, rest.FlagUsages())
			}
		}
		_, err := fmt.Fprint(c.OutOrStderr(), b.String())
		return err
	})
}
