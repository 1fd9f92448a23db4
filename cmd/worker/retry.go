package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/clienv"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing/pricer"
)

func newRetryCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "retry CONTRACT...",
		Short: "Re-enable quarantined (or backing-off) contracts",
		Args:  cobra.MinimumNArgs(1),
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
