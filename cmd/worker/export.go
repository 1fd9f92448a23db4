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
		Long: `export writes every priced record as CSV. A file is written under a
temporary name, synced and renamed, so a failed export never leaves a
truncated file; it gets the usual permissions (0666 less the umask).

Records not yet priced are left out: export says how many on stderr, and
with --complete fails instead (exit 4) without writing anything. So does
a contract whose checkpoint lies beyond its stored records (state
inconsistent in status): records skipped are not priced, and --complete
refuses to export rather than leave them out silently.

--generation previous writes, for each re-priced contract, the output its
current generation replaced (see worker generations), and for the other
contracts their current output; current (the default) writes what
priced holds now; preview writes each contract's preview waiting for
worker generations approve|discard (as far as it is priced), and the
current output of the others.

Writes a file: --out, replacing a file of that name (- writes to standard
output instead). It only reads the database.`,
		Example: `  worker export --out priced.csv
  worker export --out - | gzip > priced.csv.gz
  worker run --until-done && worker export --complete --out priced.csv`,
		Args: cobra.NoArgs,
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
