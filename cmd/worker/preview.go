package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/noun"
	"github.com/batonhq/baton/pricing/rerate"
)

// decidedJSON is what worker generations approve|discard print with
// --json.
type decidedJSON struct {
	Contracts []rerate.Decided `json:"contracts"`
	// Approved or discarded previews; of the approved, Current became
	// current at once and Pricing are priced on to become current.
	Previews int `json:"previews"`
	Current  int `json:"current,omitempty"`
	Pricing  int `json:"pricing,omitempty"`
}

// newDecideCmd is worker generations approve or discard.
func newDecideCmd(g *globals, verb string) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   verb + " [CONTRACT...] [--json]",
		Short: map[string]string{"approve": "Make previews current", "discard": "Drop previews"}[verb],
		RunE: func(cmd *cobra.Command, args []string) error {
			db, err := g.open(cmd.Context(), dbconn.Options{ApplicationName: "baton-" + verb, MaxOpenConns: 1,
				LockTimeout: 10 * time.Second, StatementTimeout: 10 * time.Minute}, true)
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
				return usageError("%v; nothing was %sd", err, verb)
			}
			if err != nil {
				return err
			}
			out := decidedJSON{Contracts: decided, Previews: len(decided)}
			if out.Contracts == nil {
				out.Contracts = []rerate.Decided{}
			}
			for _, d := range decided {
				if d.Pricing {
					out.Pricing++
				} else if verb == "approve" {
					out.Current++
				}
			}
			if asJSON {
				enc := json.NewEncoder(g.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			fmt.Fprintf(g.stdout, "%s: %s %sd", verb, noun.Count(int64(out.Previews), "preview", "previews"), verb)
			if verb == "approve" && out.Previews > 0 {
				fmt.Fprintf(g.stdout, " (%d current now, %d being priced to become current once caught up)", out.Current, out.Pricing)
			}
			fmt.Fprintln(g.stdout)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the outcome as JSON")
	return cmd
}

// printPreviews lists the previews waiting, after the generations table,
// on w: each with its totals and the change from the current generation.
func printPreviews(g *globals, store *rerate.Store, cmd *cobra.Command, contracts []string) error {
	previews, err := store.Previews(cmd.Context(), contracts)
	if err != nil {
		return err
	}
	for _, p := range previews {
		progress := "caught up"
		if !p.CaughtUp {
			progress = fmt.Sprintf("priced %d of %d records so far", p.Priced, p.Records)
		}
		fmt.Fprintf(g.stderr, "preview: contract %s generation %d: net total %d (%+d from generation %d), %s; worker generations approve|discard %s\n",
			p.Contract, p.Generation, p.NetTotal, p.NetChange, p.Current, progress, p.Contract)
	}
	return nil
}
