package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/clienv"
	"github.com/batonhq/baton/internal/noun"
	"github.com/batonhq/baton/internal/report"
	"github.com/batonhq/baton/internal/report/text"
	"github.com/batonhq/baton/pricing/export"
	"github.com/batonhq/baton/pricing/ingest"
	"github.com/batonhq/baton/pricing/rerate"
)

// rerateConn is the connection of a command that starts or decides
// re-pricings: they lock task rows, waiting for batches in flight.
func rerateConn(name string) dbconn.Options {
	return dbconn.Options{ApplicationName: "baton-" + name, MaxOpenConns: 1,
		LockTimeout: 10 * time.Second, StatementTimeout: 10 * time.Minute}
}

func newRepriceCmd(g *globals) *cobra.Command {
	var all, asJSON, preview bool
	var reason string
	cmd := &cobra.Command{
		Use:   "reprice (--all | CONTRACT...) [--preview] [--reason TEXT] [--json]",
		Short: "Re-price contracts under their current tiers, as a new generation",
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case all && len(args) > 0:
				return usageError("--all and contract ids do not go together")
			case !all && len(args) == 0:
				return usageError("say which contracts: CONTRACT... or --all")
			}
			db, err := g.open(cmd.Context(), rerateConn("reprice"), true)
			if err != nil {
				return err
			}
			defer db.Close()
			started, err := ingest.NewStore(db, g.schema).Reprice(cmd.Context(), ingest.RepriceOptions{Contracts: args, All: all,
				Reason: reason, StartedBy: clienv.Operator("reprice"), Preview: preview})
			if errors.Is(err, rerate.ErrUnknownContract) || errors.Is(err, rerate.ErrPreviewPending) {
				return usageError("%v; nothing was re-priced", err)
			}
			if err != nil {
				return err
			}
			rep := text.NewStartReport(started)
			if asJSON {
				return report.WriteJSON(g.stdout, rep)
			}
			rep.WriteText(g.stdout, "reprice", preview)
			return nil
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "every contract")
	cmd.Flags().BoolVar(&preview, "preview", false, "price the new generations as previews, current only once approved")
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded with the new generations")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the outcome as JSON")
	return cmd
}

func newGenerationsCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "generations [--json] [CONTRACT...]",
		Short: "List the generations of re-priced contracts",
		RunE: func(cmd *cobra.Command, args []string) error {
			db, err := g.open(cmd.Context(), dbconn.Options{MaxOpenConns: 1}, true)
			if err != nil {
				return err
			}
			defer db.Close()
			store := rerate.NewStore(db, g.schema)
			gens, err := store.List(cmd.Context(), args)
			if err != nil {
				return err
			}
			if asJSON {
				return report.WriteJSON(g.stdout, append([]rerate.Generation{}, gens...))
			}
			if err := text.WriteGenerations(g.stdout, gens); err != nil {
				return err
			}
			fmt.Fprintf(g.stderr, "%s\n", noun.Count(int64(len(gens)), "generation", "generations"))
			previews, err := store.Previews(cmd.Context(), args)
			text.WritePreviews(g.stderr, previews)
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the generations as JSON")
	cmd.AddCommand(newDecideCmd(g, "approve"), newDecideCmd(g, "discard"))
	return cmd
}

func newDiffCmd(g *globals) *cobra.Command {
	var contracts []string
	var out string
	var preview bool
	cmd := &cobra.Command{
		Use:   "diff [--contract C...] [--preview] [--out FILE]",
		Short: "List the records whose priced amounts changed between each re-priced contract's previous and current generation",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, err := g.open(cmd.Context(), dbconn.Options{MaxOpenConns: 1}, true)
			if err != nil {
				return err
			}
			defer db.Close()
			_, err = export.ToPath(out, g.stdout, func(w io.Writer) (int64, error) {
				return text.WriteDiff(cmd.Context(), rerate.NewStore(db, g.schema), w, g.stderr, contracts, preview)
			})
			return err
		},
	}
	cmd.Flags().StringSliceVar(&contracts, "contract", nil, "only these contracts (repeat or separate with commas)")
	cmd.Flags().StringVar(&out, "out", "", "output file, or - for standard output (the default)")
	cmd.Flags().BoolVar(&preview, "preview", false, "compare the current generations with their previews")
	return cmd
}
