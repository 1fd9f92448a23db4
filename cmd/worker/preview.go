package main

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/internal/report"
	"github.com/batonhq/baton/internal/report/text"
	"github.com/batonhq/baton/pricing/rerate"
)

// newDecideCmd is worker generations approve or discard.
func newDecideCmd(g *globals, verb string) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   verb + " [CONTRACT...] [--json]",
		Short: map[string]string{"approve": "Make previews current", "discard": "Drop previews"}[verb],
		RunE: func(cmd *cobra.Command, args []string) error {
			db, err := g.open(cmd.Context(), rerateConn(verb), true)
			if err != nil {
				return err
			}
			defer db.Close()
			store := rerate.NewStore(db, g.schema)
			decide := store.Approve
			if verb == "discard" {
				decide = store.Discard
			}
			decided, err := decide(cmd.Context(), args)
			if errors.Is(err, rerate.ErrUnknownContract) || errors.Is(err, rerate.ErrNoPreview) {
				return usageError("%v; nothing was %s", err, text.Decision(verb))
			}
			if err != nil {
				return err
			}
			rep := text.NewDecideReport(verb, decided)
			if asJSON {
				return report.WriteJSON(g.stdout, rep)
			}
			rep.WriteText(g.stdout)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the outcome as JSON")
	return cmd
}
