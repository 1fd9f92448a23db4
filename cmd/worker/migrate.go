package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/schema"
)

func newMigrateCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Apply pending schema migrations (safe to run from many processes at once)",
		Args:  cobra.NoArgs,
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
