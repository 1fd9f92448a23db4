package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/clienv"
	"github.com/batonhq/baton/internal/cliflags"
	"github.com/batonhq/baton/internal/interrupt"
	"github.com/batonhq/baton/internal/progress"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing/export"
	"github.com/batonhq/baton/pricing/ingest"
	"github.com/batonhq/baton/pricing/pricer"
	"github.com/batonhq/baton/pricing/seed"
	"github.com/batonhq/baton/schema"
)

func newMigrateCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Apply pending schema migrations (safe to run from many processes at once)",
		Long: `migrate applies baton's embedded migrations (core, pricing) under an
advisory lock, so many processes may run it at once.

Changes the database: creates baton's schema (--schema) and its tables, or
applies the migrations it lacks. A database of a release without its own
schema is upgraded first: baton's tables move into the schema with their
data, and baton's row is removed from bun_migrations.`,
		Example: `  worker migrate
  DATABASE_URL=postgres://baton@db.example/baton worker migrate`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, err := g.open(cmd.Context(), dbconn.Options{MaxOpenConns: 2}, false)
			if err != nil {
				return err
			}
			defer db.Close()
			applied, err := schema.Migrate(cmd.Context(), db, g.SchemaConfig())
			if err != nil {
				return err
			}
			if len(applied) == 0 {
				fmt.Fprintln(g.stdout, "schema is up to date")
			}
			for _, m := range applied {
				fmt.Fprintln(g.stdout, "applied migration", m)
			}
			return nil
		},
	}
}

func newLoadCmd(g *globals) *cobra.Command {
	var opts ingest.Options
	var memoryMiB int64
	cmd := &cobra.Command{
		Use:   "load [--tiers FILE [--reprice]] [--records FILE [--amend]] [--reason TEXT] [--skip-invalid --reject-file FILE]",
		Short: "Validate and load tiers and/or records (all or nothing by default)",
		Long: `load validates tiers and/or records CSV files and loads them in one
transaction: by default all or nothing, listing invalid rows as
FILE:LINE: reason (exit 3). A UTF-8 byte order mark at the start of a file
is ignored. On a terminal (and not with --log-format json), progress shows
the current stage: reading each file (for records: rows read, the share
of the file, the rate and the time left), validating, inserting the
records, then updating the contracts. SIGINT (Ctrl-C) or SIGTERM before
the commit rolls the load back: nothing is loaded, and the exit code is
130 (143 for SIGTERM).

Records are written while the file is read, in at most --memory MiB
whatever the file's size, in whole chunks however the file interleaves
its contracts: what does not fit waits in temporary files (removed as
soon as they are made) until the file has been read. A larger budget
writes less to those files (a file whose records fit writes none) and
reads them back in fewer, larger parts.

Changes the database: adds contracts, their tiers and records; a tiers file
replaces the tiers of a contract it names (refused once the contract has
priced records, unless --reprice: the new tiers then apply and the
contract is re-priced under them as a new generation, see worker
generations). A stored record id with another amount is refused, unless
--amend: the amount is replaced (the old one kept in the audit trail) and
the contract re-priced from that record on. --reason is recorded with
the generations and amendments.
Writes a file with --skip-invalid: the rejected rows, to --reject-file.`,
		Example: `  worker load --tiers tiers.csv --records records.csv
  worker load --records more.csv --skip-invalid --reject-file rejected.csv
  worker load --records records.csv --max-errors 0   # list every invalid row
  worker load --tiers corrected-tiers.csv --reprice --reason "Q3 tiers corrected"
  worker load --records corrections.csv --amend --reason "meter 7 re-read"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.TiersPath == "" && opts.RecordsPath == "" {
				return usageError("give --tiers, --records or both")
			}
			if opts.SkipInvalid != (opts.RejectPath != "") {
				return usageError("--skip-invalid and --reject-file go together")
			}
			if opts.Reprice && opts.TiersPath == "" {
				return usageError("--reprice applies a tiers file: give --tiers")
			}
			if opts.Amend && opts.RecordsPath == "" {
				return usageError("--amend applies a records file: give --records")
			}
			if opts.Reason != "" && !opts.Reprice && !opts.Amend {
				return usageError("--reason goes with --reprice or --amend")
			}
			opts.StartedBy = startedBy("load")
			for flag, path := range map[string]string{"--tiers": opts.TiersPath, "--records": opts.RecordsPath} {
				if err := checkInputFile(flag, path); err != nil {
					return err
				}
			}
			if opts.MaxListed == 0 {
				opts.MaxListed = math.MaxInt // 0 lists every invalid row
			}
			db, err := g.open(cmd.Context(), dbconn.Options{ApplicationName: "baton-load", MaxOpenConns: 2}, true)
			if err != nil {
				return err
			}
			defer db.Close()
			opts.MemoryLimit = memoryMiB << 20
			limitHeap(opts.MemoryLimit)
			p := progress.NewLoad(g.stderr, "loading", g.LogFormat)
			opts.Progress = p.Update
			opts.ReadProgress = p.Reading
			g.OwnsDurability = true // a NotReplicatedError names the load
			rep, err := ingest.NewStore(db, g.schema).Load(cmd.Context(), opts)
			if errors.Is(err, ingest.ErrInterrupted) {
				p.End()
				return clienv.Exit(interrupt.ExitCode(cmd.Context()), err)
			}
			p.Done()
			var unconfirmed *ingest.NotReplicatedError
			if err != nil && !errors.As(err, &unconfirmed) {
				return err
			}
			rep.WriteSummary(g.stdout, opts)
			return err // nil, or committed but not confirmed by the standby (exit 6)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.TiersPath, "tiers", "", "tiers CSV (contract_id,threshold_minor,discount_bp)")
	f.StringVar(&opts.RecordsPath, "records", "", "records CSV (contract_id,record_id,amount_minor)")
	f.BoolVar(&opts.SkipInvalid, "skip-invalid", false, "load the valid rows and write the invalid ones to --reject-file")
	f.StringVar(&opts.RejectPath, "reject-file", "", "where --skip-invalid writes rejected rows with their reasons")
	f.BoolVar(&opts.Reprice, "reprice", false, "apply changed tier sets of contracts with priced records and re-price them")
	f.BoolVar(&opts.Amend, "amend", false, "a stored record id with another amount replaces the amount and re-prices from that record")
	f.StringVar(&opts.Reason, "reason", "", "why, recorded with the re-pricing (with --reprice or --amend)")
	f.IntVar(&opts.MaxListed, "max-errors", ingest.MaxListedDefault, "invalid rows listed in the error, 0 for all (all are counted either way)")
	cliflags.NonNegative(f, "max-errors")
	f.DurationVar(&opts.StatementTimeout, "statement-timeout", ingest.StatementTimeoutDefault, "longest statement of the load (0: no limit)")
	f.DurationVar(&opts.LockTimeout, "lock-timeout", ingest.LockTimeoutDefault, "longest wait for a row lock held by a worker (0: no limit); waiting for another load is not limited")
	f.DurationVar(&opts.IdleInTransactionTimeout, "idle-timeout", ingest.IdleInTransactionTimeoutDefault, "the server ends a load that pauses this long between statements (stalled, cut off), releasing its locks (0: no limit)")
	cliflags.NonNegative(f, "statement-timeout", "lock-timeout", "idle-timeout")
	f.Int64Var(&memoryMiB, "memory", ingest.MemoryLimitDefault>>20, "MiB the load may take for the records whatever the file's size (at least 1); more writes less to temporary files")
	cliflags.Positive(f, "memory")
	return cmd
}

// limitHeap sets the Go runtime's soft memory limit for a load taking
// budget bytes for its records (unless GOMEMLIMIT sets one): the budget
// and room for the rest of the process, so that garbage left by the
// records written is collected before the process grows much beyond them.
func limitHeap(budget int64) {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(budget + loadHeapOverhead)
	}
}

// loadHeapOverhead is the memory a load takes besides its records' budget
// (read-ahead batches, connection buffers, the runtime).
const loadHeapOverhead = 64 << 20

func newExportCmd(g *globals) *cobra.Command {
	var out, generation string
	var complete bool
	cmd := &cobra.Command{
		Use:   "export --out FILE [--generation previous|current]",
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
priced holds now.

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
			case "previous":
				if complete {
					return usageError("--complete checks the current generation; it does not go with --generation previous")
				}
			default:
				return usageError("--generation %q: want previous or current", generation)
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
			priced := export.NewStore(db, g.schema)
			write := func(w io.Writer) (int64, error) { return priced.Write(cmd.Context(), w) }
			var progress pricer.Progress
			if generation == "previous" {
				write = func(w io.Writer) (int64, error) { return priced.WritePrevious(cmd.Context(), w) }
			} else if complete {
				// One snapshot: checked complete, then written.
				write = func(w io.Writer) (int64, error) { return priced.WriteComplete(cmd.Context(), w) }
			} else if progress, err = pricer.NewStore(db, g.schema).CheckProgress(cmd.Context()); err != nil {
				return err
			}
			var n int64
			if out == "-" {
				w := bufio.NewWriterSize(g.stdout, 1<<16)
				if n, err = write(w); err == nil {
					err = w.Flush()
				}
			} else {
				n, err = export.ToFile(out, write)
			}
			if errors.Is(err, export.ErrIncomplete) {
				return clienv.Exit(clienv.ExitIncomplete, fmt.Errorf("%w; nothing was exported (run the workers to completion, see worker status, or export without --complete)", err))
			}
			if err != nil {
				return err
			}
			if out != "-" {
				fmt.Fprintf(g.stderr, "exported %d priced records to %s\n", n, out)
			}
			if progress.Unpriced > 0 {
				fmt.Fprintf(g.stderr, "warning: %d records are not priced yet and were not exported (--complete fails instead)\n", progress.Unpriced)
			}
			for _, c := range progress.Inconsistent {
				fmt.Fprintf(g.stderr, "warning: %s; its records beyond the checkpoint may be missing (--complete fails instead)\n", c)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "output file, or - for standard output")
	cmd.Flags().BoolVar(&complete, "complete", false, "fail (exit 4) instead of exporting while some records are unpriced")
	cmd.Flags().StringVar(&generation, "generation", "current", "which generation of re-priced contracts: previous or current")
	return cmd
}

// checkInputFile refuses a missing or unreadable input file before the
// database is contacted.
func checkInputFile(flag, path string) error {
	if path == "" {
		return nil
	}
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return usageError("%s %s: no such file", flag, path)
	case err != nil:
		return usageError("%s %s: %v", flag, path, err)
	case st.IsDir():
		return usageError("%s %s is a directory, want a CSV file", flag, path)
	}
	return nil
}

func newRetryCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "retry CONTRACT...",
		Short: "Re-enable quarantined (or backing-off) contracts",
		Long: `retry re-enables quarantined (or backing-off) contracts, so workers claim
them again at once.

Changes the database: resets each named failed contract's attempts, error
and back-off, and records the retry in its history. A contract that does
not exist is reported after the others are done, with exit code 5.`,
		Example: `  worker retry c-17
  worker status --json | jq -r '.partitions[] | select(.state=="quarantined") | .contract_id' | xargs worker retry`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			db, err := g.open(cmd.Context(), dbconn.Options{MaxOpenConns: 2}, true)
			if err != nil {
				return err
			}
			defer db.Close()
			store := pricer.Partitions(db, g.schema)
			var missing []string
			for _, c := range args {
				changed, err := store.Retry(cmd.Context(), c)
				switch {
				case errors.Is(err, partition.ErrNotFound):
					missing = append(missing, c)
				case err != nil:
					// The store speaks of partitions; this command of contracts.
					if cause := errors.Unwrap(err); cause != nil {
						err = cause
					}
					return fmt.Errorf("retrying contract %s: %w", c, err)
				case changed:
					fmt.Fprintf(g.stdout, "%s: re-enabled\n", c)
				default:
					fmt.Fprintf(g.stdout, "%s: not failed, nothing to do\n", c)
				}
			}
			if len(missing) > 0 {
				return clienv.Exit(clienv.ExitNotFound, fmt.Errorf("no such contract: %s (see worker status)", strings.Join(missing, ", ")))
			}
			return nil
		},
	}
}

func newSeedCmd(g *globals) *cobra.Command {
	var o seed.Options
	var dir, shape string
	var load bool
	cmd := &cobra.Command{
		Use:   "seed --contracts N --records-per-contract M [--shape uniform|zipf:S|hot:F] [--seed S] [--dir DIR] [--load]",
		Short: "Generate deterministic synthetic tiers and records CSV (and optionally load them)",
		Long: `seed generates synthetic tiers and records: the same --seed gives the
same data. There are N × M records whatever the --shape: uniform gives
every contract M; zipf:S gives contract i a share proportional to
1/(i+1)^S (zipf:1.1: the largest of 1,000 contracts holds 18%); hot:F
gives one contract the fraction F of them and spreads the rest evenly.
Every contract has at least one record, and the contracts' records are
interleaved in the file.

Writes files: tiers.csv and records.csv in --dir, replacing files of those
names. Changes the database with --load: loads them as "worker load"
does, adding contracts (ids --prefix and a number), their tiers and
records.`,
		Example: `  worker seed --contracts 100 --records-per-contract 1000 --dir data
  worker seed --contracts 10 --records-per-contract 50 --seed 7 --load
  worker seed --contracts 1000 --records-per-contract 1000 --shape zipf:1.1
  worker seed --contracts 1000 --records-per-contract 1000 --shape hot:0.5`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.Shape, err = seed.ParseShape(shape); err != nil {
				// The error reads 'shape "TEXT": reason'.
				return usageError("--%v", err)
			}
			p := progress.New(g.stderr, "generating")
			tiers, records, err := seed.WriteFiles(dir, o, func(rows int64) { p.Update("records", rows) })
			p.Done()
			if err != nil {
				return err
			}
			if o.Shape.Kind == seed.Uniform {
				fmt.Fprintf(g.stdout, "wrote %s and %s (%d contracts × %d records, seed %d)\n",
					tiers, records, o.Contracts, o.RecordsPerContract, o.Seed)
			} else {
				fmt.Fprintf(g.stdout, "wrote %s and %s (%d contracts, %d records shaped %s, seed %d)\n",
					tiers, records, o.Contracts, o.Records(), o.Shape, o.Seed)
			}
			if !load {
				return nil
			}
			db, err := g.open(cmd.Context(), dbconn.Options{ApplicationName: "baton-load", MaxOpenConns: 2}, true)
			if err != nil {
				return err
			}
			defer db.Close()
			p = progress.New(g.stderr, "loading")
			rep, err := ingest.NewStore(db, g.schema).Load(cmd.Context(), ingest.Options{TiersPath: tiers, RecordsPath: records, Progress: p.Update})
			if errors.Is(err, ingest.ErrInterrupted) {
				p.End()
				return clienv.Exit(interrupt.ExitCode(cmd.Context()), err)
			}
			p.Done()
			if err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "loaded %d records for %d contracts in %s\n", rep.RecordsAccepted, o.Contracts, rep.Duration.Round(time.Millisecond))
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Contracts, "contracts", 100, "number of contracts")
	f.IntVar(&o.RecordsPerContract, "records-per-contract", 1000, "records per contract, their mean with a --shape other than uniform (0: contracts and tiers only)")
	f.StringVar(&shape, "shape", "uniform", "how records are spread over contracts: uniform, zipf:S (S > 0, say zipf:1.1) or hot:F (0 < F < 1, say hot:0.5)")
	f.Uint64Var(&o.Seed, "seed", 1, "random seed, any value (same seed, same data)")
	f.StringVar(&o.Prefix, "prefix", "c", "contract id prefix")
	f.StringVar(&dir, "dir", ".", "directory for tiers.csv and records.csv")
	f.BoolVar(&load, "load", false, "load the generated files into the database")
	cliflags.Positive(f, "contracts")
	cliflags.NonNegative(f, "records-per-contract")
	cliflags.AnyValue(f, "seed")
	return cmd
}
