package main

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/clienv"
)

// globals is the command environment (clienv.Env: the global flags, the
// logger, opening the database), with the schema and output streams under
// the names the commands use.
type globals struct {
	*clienv.Env
	schema         string
	stdout, stderr io.Writer
}

func (g *globals) setup(cmd *cobra.Command) error {
	if err := g.Setup(cmd.OutOrStdout(), cmd.ErrOrStderr()); err != nil {
		return err
	}
	g.schema, g.stdout, g.stderr = g.Schema, g.Stdout, g.Stderr
	return nil
}

// open is clienv.Env.Open: it connects and, unless migrating, refuses a
// schema that does not match this binary.
func (g *globals) open(ctx context.Context, opts dbconn.Options, checkSchema bool) (*dbconn.DB, error) {
	return g.Open(ctx, opts, checkSchema)
}

// usageError is a usage error (exit 2) with a formatted message.
var usageError = clienv.UsageError
