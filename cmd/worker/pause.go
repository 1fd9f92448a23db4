package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/clienv"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing/pricer"
)

// pauseFlags are pause's and resume's flags.
type pauseFlags struct {
	kind, by, reason string
}

// run opens the database and calls do with the store of the kind named
// (pricing unless --kind) and a description of what the arguments name;
// with no contracts the command acts on the whole kind, which only an
// explicit --kind may ask for.
func (f *pauseFlags) run(cmd *cobra.Command, g *globals, contracts []string, do func(*partition.Store, string) error) error {
	if cmd.Flags().Changed("kind") {
		if err := partition.ValidateKind(f.kind); err != nil {
			return usageError("--kind: %v", err)
		}
	} else if len(contracts) == 0 {
		return usageError("name the contracts, or --kind for every contract of a kind")
	}
	db, err := g.open(cmd.Context(), dbconn.Options{MaxOpenConns: 2}, true)
	if err != nil {
		return err
	}
	defer db.Close()
	store := pricer.Partitions(db, g.schema).Kind(f.kind)
	what := "kind " + store.KindName()
	if len(contracts) > 0 {
		what = strings.Join(contracts, ", ")
	}
	return do(store, what)
}

func newPauseCmd(g *globals) *cobra.Command {
	f := &pauseFlags{}
	cmd := &cobra.Command{
		Use:   "pause [--kind K] [CONTRACT...] [--reason TEXT] [--by NAME]",
		Short: "Pause contracts, or a whole kind, until resumed",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.run(cmd, g, args, func(store *partition.Store, what string) error {
				made, err := store.Pause(cmd.Context(), f.by, f.reason, args...)
				if err != nil {
					return err
				}
				fmt.Fprintf(g.stdout, "paused %s (%d new, the rest paused already)\n", what, len(made))
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&f.kind, "kind", pricer.Kind, "the kind of the contracts; with no contract named, pause the whole kind")
	cmd.Flags().StringVar(&f.reason, "reason", "", "why, recorded with the pause and shown by status")
	cmd.Flags().StringVar(&f.by, "by", clienv.Operator("pause"), "who pauses, recorded with the pause")
	return cmd
}

func newResumeCmd(g *globals) *cobra.Command {
	f := &pauseFlags{}
	cmd := &cobra.Command{
		Use:   "resume [--kind K] [CONTRACT...] [--by NAME]",
		Short: "Resume paused contracts, or a paused kind",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.run(cmd, g, args, func(store *partition.Store, what string) error {
				lifted, err := store.Resume(cmd.Context(), f.by, args...)
				if err != nil {
					return err
				}
				if len(lifted) == 0 {
					fmt.Fprintf(g.stdout, "%s: not paused, nothing to do\n", what)
				}
				for _, p := range lifted {
					fmt.Fprintf(g.stdout, "resumed %s (paused since %s by %s)\n", pauseName(p), p.Since.UTC().Format(time.RFC3339), p.By)
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&f.kind, "kind", pricer.Kind, "the kind of the contracts; with no contract named, resume the kind")
	cmd.Flags().StringVar(&f.by, "by", clienv.Operator("resume"), "who resumes, recorded in the history")
	return cmd
}

// pauseName names what a pause covers.
func pauseName(p partition.Pause) string {
	if p.Key == "" {
		return "kind " + p.Kind
	}
	return p.Key
}
