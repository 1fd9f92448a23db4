package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/pricing/export"
)

func newExportCmd(g *globals) *cobra.Command {
	var out, generation string
	var complete bool
	cmd := &cobra.Command{
		Use:   "export --out FILE [--generation previous|current|preview]",
		Short: "Write priced records as CSV, ordered by contract id (byte order) then acceptance order",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return usageError("--out is required (use - for standard output)")
			}
			switch generation {
			case "current":
			case "previous", "preview":
				if complete {
					return usageError("--complete checks the current generation; it does not go with --generation %s", generation)
				}
			default:
				return usageError("--generation %q: want previous, current or preview", generation)
			}
			if out != "-" {
				if st, err := os.Stat(out); err == nil && st.IsDir() {
					return usageError("--out %s is a directory; give the name of the file to write", out)
				}
			}
			db, err := g.open(cmd.Context(), dbconn.Options{MaxOpenConns: 2}, true)
			if err != nil {
				return err
			}
			defer db.Close()
			res, err := export.NewStore(db, g.schema).Export(cmd.Context(),
				export.Options{Out: out, Stdout: g.stdout, Previous: generation == "previous", Preview: generation == "preview", Complete: complete})
			if errors.Is(err, export.ErrIncomplete) {
				return fmt.Errorf("%w; nothing was exported (run the workers to completion, see worker status, or export without --complete)", err)
			}
			if err != nil {
				return err
			}
			res.WriteSummary(g.stderr, out)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "output file, or - for standard output")
	cmd.Flags().BoolVar(&complete, "complete", false, "fail (exit 4) instead of exporting while some records are unpriced")
	cmd.Flags().StringVar(&generation, "generation", "current", "which generation of re-priced contracts: previous, current or preview")
	return cmd
}
