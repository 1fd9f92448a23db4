package main

import (
	"cmp"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/noun"
	"github.com/batonhq/baton/pricing/export"
	"github.com/batonhq/baton/pricing/ingest"
	"github.com/batonhq/baton/pricing/rerate"
)

// startedBy names who starts a re-pricing: the command and the operating
// system user and host.
func startedBy(command string) string {
	who := "unknown"
	if u, err := user.Current(); err == nil {
		who = u.Username
	}
	if h, err := os.Hostname(); err == nil {
		who += "@" + h
	}
	return "worker " + command + " (" + who + ")"
}

type repriceJSON struct {
	Started   []rerate.Started `json:"contracts"`
	Repricing int              `json:"repricing"` // contracts with a new generation
	Unchanged int              `json:"unchanged"` // contracts with nothing priced to re-price
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
			db, err := g.open(cmd.Context(), dbconn.Options{ApplicationName: "baton-reprice", MaxOpenConns: 1,
				LockTimeout: 10 * time.Second, StatementTimeout: 10 * time.Minute}, true)
			if err != nil {
				return err
			}
			defer db.Close()
			started, err := ingest.NewStore(db, g.schema).Reprice(cmd.Context(), ingest.RepriceOptions{Contracts: args, All: all,
				Reason: reason, StartedBy: startedBy("reprice"), Preview: preview})
			if errors.Is(err, rerate.ErrUnknownContract) || errors.Is(err, rerate.ErrPreviewPending) {
				return usageError("%v; nothing was re-priced", err)
			}
			if err != nil {
				return err
			}
			out := repriceJSON{Started: started}
			for _, s := range started {
				if s.Generation > 0 {
					out.Repricing++
				} else {
					out.Unchanged++
				}
			}
			if out.Started == nil {
				out.Started = []rerate.Started{}
			}
			if asJSON {
				enc := json.NewEncoder(g.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			if preview {
				fmt.Fprintf(g.stdout, "reprice: %s previewed as a new generation (worker generations approve|discard)\n",
					noun.Count(int64(out.Repricing), "contract", "contracts"))
				return nil
			}
			fmt.Fprintf(g.stdout, "reprice: %s re-pricing as a new generation, %d with nothing priced to re-price\n",
				noun.Count(int64(out.Repricing), "contract", "contracts"), out.Unchanged)
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
				if gens == nil {
					gens = []rerate.Generation{}
				}
				enc := json.NewEncoder(g.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(gens)
			}
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "CONTRACT\tGENERATION\tSTATE\tREQUESTED\tPRICING_STARTED\tFINISHED\tFROM_SEQ\tRECORDS\tNET_TOTAL\tSTARTED_BY\tREASON")
			for _, x := range gens {
				fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", x.Contract, x.Generation, x.State,
					x.StartedAt.UTC().Format(time.RFC3339), timeCell(x.PricingStartedAt), timeCell(x.FinishedAt), x.FromSeq, x.Records, x.NetTotal,
					cmp.Or(x.StartedBy, "-"), x.Reason)
			}
			if err := w.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(g.stderr, "%s\n", noun.Count(int64(len(gens)), "generation", "generations"))
			return printPreviews(g, store, cmd, args)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the generations as JSON")
	cmd.AddCommand(newDecideCmd(g, "approve"), newDecideCmd(g, "discard"))
	return cmd
}

// diffHeader is the header of worker diff's CSV.
const diffHeader = "contract_id,record_id,old_gross_minor,old_discount_minor,old_net_minor,new_gross_minor,new_discount_minor,new_net_minor"

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
			write := func(w io.Writer) (int64, error) {
				cw := csv.NewWriter(w)
				if _, err := io.WriteString(w, diffHeader+"\n"); err != nil {
					return 0, err
				}
				var n int64
				diff := rerate.NewStore(db, g.schema).Diff
				if preview {
					diff = rerate.NewStore(db, g.schema).DiffPreview
				}
				diffs, err := diff(cmd.Context(), contracts, func(c rerate.Change) error {
					n++
					return cw.Write(c.Columns())
				})
				if err != nil {
					return n, err
				}
				cw.Flush()
				if err := cw.Error(); err != nil {
					return n, err
				}
				for _, d := range diffs {
					fmt.Fprintf(g.stderr, "contract %s: generation %d net total %d, generation %d net total %d (%+d), %s changed\n",
						d.Contract, d.Previous, d.OldNetTotal, d.Current, d.NewNetTotal, d.NewNetTotal-d.OldNetTotal,
						noun.Count(d.ChangedRecords, "record", "records"))
				}
				fmt.Fprintf(g.stderr, "diff: %s of %s\n", noun.Count(n, "changed record", "changed records"),
					noun.Count(int64(len(diffs)), "re-priced contract", "re-priced contracts"))
				return n, nil
			}
			if out == "" || out == "-" {
				_, err = write(g.stdout)
				return err
			}
			_, err = export.ToFile(out, write)
			return err
		},
	}
	cmd.Flags().StringSliceVar(&contracts, "contract", nil, "only these contracts (repeat or separate with commas)")
	cmd.Flags().StringVar(&out, "out", "", "output file, or - for standard output (the default)")
	cmd.Flags().BoolVar(&preview, "preview", false, "compare the current generations with their previews")
	return cmd
}

// timeCell formats t for a table cell, "-" if nil.
func timeCell(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
