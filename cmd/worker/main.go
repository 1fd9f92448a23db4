// Command worker is baton's single binary: it migrates the schema, loads
// and exports pricing data, runs distributed pricing workers, and shows
// their status.
//
// Exit codes: 0 success; 1 failure; 2 bad usage or configuration; 3 invalid
// input (nothing was loaded); 4 work left on quarantined contracts or
// unpriced records; 5 no such contract or job; 6 committed on the primary
// but not confirmed by its synchronous standby.
package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/internal/buildinfo"
	"github.com/batonhq/baton/internal/clienv"
	"github.com/batonhq/baton/internal/cliflags"
	"github.com/batonhq/baton/internal/interrupt"
	"github.com/batonhq/baton/internal/redact"
)

func main() {
	os.Exit(execute(os.Args[1:]))
}

// execute runs the CLI and returns its exit code. Everything it writes to
// stderr (errors, logs, a panic) goes through one redactor, so no database
// password can appear in it. That includes what the Go runtime itself
// writes when a goroutine other than this one panics, which no recover
// here can catch: file descriptor 2 is handed to a filter process (this
// binary again, see redact.GuardStderr) that redacts it and outlives the
// crash.
func execute(args []string) (code int) {
	if redact.ServeStderrFilter() {
		return 0
	}
	dsns := append([]string{os.Getenv("DATABASE_URL"), os.Getenv("BATON_LISTEN_DATABASE_URL")}, clienv.DatabaseURLArgs(args)...)
	red := redact.New(dsns...)
	out := os.Stderr
	guard, gerr := redact.GuardStderr(dsns...)
	if gerr == nil {
		// Runs last: after the report of a panic below, so that what
		// the filter still holds is out before the process exits.
		defer func() { _ = guard.Close() }()
		out = guard.Stderr
	}
	stderr := red.Writer(out)
	if gerr != nil {
		fmt.Fprintf(stderr, "worker: warning: a crash in a background goroutine may show a database password: %v\n", gerr)
	}
	if testHookGuarded != nil {
		testHookGuarded()
	}
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "worker: internal error: %v\n%s", r, debug.Stack())
			code = clienv.ExitFailure
		}
	}()
	root, g := newRoot()
	g.Redactor = red
	root.SetArgs(args)
	root.SetOut(os.Stdout)
	root.SetErr(stderr)
	ctx, stop := interrupt.Context()
	defer stop()
	err := root.ExecuteContext(ctx)
	if err == nil {
		err = g.NotReplicated()
	}
	if err == nil {
		return 0
	}
	g.ReportError(stderr, err)
	return clienv.ExitCode(err)
}

// testHookGuarded, when set (by tests only), runs once standard error is
// guarded, before the command.
var testHookGuarded func()

func newRoot() (*cobra.Command, *globals) {
	g := &globals{Env: &clienv.Env{}}
	root := &cobra.Command{
		Use:   "worker",
		Short: "baton: database-coordinated batch pricing workers",
		Long: `baton distributes batch pricing over many identical worker processes that
share one PostgreSQL database and nothing else.

Each command's help says whether it changes the database or writes files;
"demo" and "schedule demo" never touch the database DATABASE_URL names.

` + clienv.ExitCodesHelp,
		Example: `  export DATABASE_URL=postgres://baton@db.example/baton
  worker migrate
  worker load --tiers tiers.csv --records records.csv
  worker run --until-done
  worker status
  worker export --out priced.csv`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// Without a command there is nothing to do: show the help and
		// fail as a usage error, as for an unknown command.
		Args: noUnknownCommand,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.SetOut(cmd.ErrOrStderr())
			_ = cmd.Help()
			return usageError("a command is required")
		},
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := cliflags.Check(cmd); err != nil {
				return usageError("%v", err)
			}
			return g.setup(cmd)
		},
	}
	root.Version = buildinfo.Version("worker")
	root.SetVersionTemplate("{{.Version}}")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return clienv.Exit(clienv.ExitUsage, err) })
	g.Register(root.PersistentFlags())
	root.AddCommand(
		newMigrateCmd(g), newLoadCmd(g), newRunCmd(g), newExportCmd(g),
		newStatusCmd(g), newRetryCmd(g), newPauseCmd(g), newResumeCmd(g), newSeedCmd(g), newDemoCmd(g), newProbeCmd(g),
		newScheduleCmd(g),
		newUICmd(g), newSignalsCmd(g),
		newPruneCmd(g),
		newRepriceCmd(g), newGenerationsCmd(g), newDiffCmd(g),
	)
	// Wrong arguments are usage errors (exit 2) for every command.
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
			if sub.Args != nil {
				sub.Args = usageArgs(sub.Args)
			}
			if !sub.Runnable() && sub.HasSubCommands() {
				// A command group without its subcommand: help, exit 2.
				sub.Args = usageArgs(noUnknownCommand)
				sub.RunE = func(cmd *cobra.Command, _ []string) error {
					cmd.SetOut(cmd.ErrOrStderr())
					_ = cmd.Help()
					return usageError("%s needs a subcommand", cmd.CommandPath())
				}
			}
		}
	}
	walk(root)
	return root, g
}

// usageArgs makes the errors of an argument check usage errors.
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		err := check(cmd, args)
		if _, ok := errors.AsType[*clienv.ExitError](err); ok {
			return err
		}
		if err != nil {
			return clienv.Exit(clienv.ExitUsage, fmt.Errorf("%s: %w; see %s --help", cmd.CommandPath(), err, cmd.CommandPath()))
		}
		return nil
	}
}

// noUnknownCommand refuses arguments to a command that only has subcommands.
func noUnknownCommand(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError("unknown command %q; see %s --help", args[0], cmd.CommandPath())
	}
	return nil
}
