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
	"strings"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/buildinfo"
	"github.com/batonhq/baton/internal/cliflags"
	"github.com/batonhq/baton/internal/dberr"
	"github.com/batonhq/baton/internal/demo"
	"github.com/batonhq/baton/internal/interrupt"
	"github.com/batonhq/baton/internal/redact"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing/ingest"
	"github.com/batonhq/baton/schema"
)

// Exit codes, as the README's table documents them.
const (
	exitFailure    = 1
	exitUsage      = 2
	exitBadInput   = 3
	exitIncomplete = 4
	exitNotFound   = 5
	// exitNotReplicated: the command's changes committed on the primary,
	// but PostgreSQL reported that its synchronous standby did not
	// confirm them (dbconn.ErrNotReplicated).
	exitNotReplicated = 6
)

// exitCodesHelp is the exit-code table shown by --help.
const exitCodesHelp = `Exit codes:
  0  success
  1  failure: the database failed or is unreachable, verification failed,
     an output file could not be written, or a second signal cut a
     graceful stop short
  2  bad usage or configuration: unknown command or flag, a missing or
     extra argument, a flag value out of range, a missing input file, no
     or a malformed database URL, a schema this binary does not match
  3  invalid input: rows of the input files break the rules (nothing was
     loaded)
  4  work left: contracts are quarantined (run --until-done), or records
     are unpriced (export --complete)
  5  not found: no such contract (retry) or job (schedule trigger,
     schedule remove)
  6  not confirmed by the standby: the changes committed on the primary,
     but PostgreSQL stopped waiting for its synchronous standby (an HA
     manager dropped it, or the session was cancelled at COMMIT), so a
     failover may lose them; check once the cluster is stable (worker
     status --loads for a load) and run the command again if they are
     missing
  130, 143
     interrupted by SIGINT (130) or SIGTERM (143) before a load
     committed: nothing was loaded (load, seed --load)`

type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// rewordedError says what err means in this command's words (contracts
// rather than partitions, say) while errors.Is still finds err.
type rewordedError struct {
	msg string
	err error
}

func (e *rewordedError) Error() string { return e.msg }
func (e *rewordedError) Unwrap() error { return e.err }

func reworded(err error, msg string) error { return &rewordedError{msg, err} }

func usageError(format string, args ...any) error {
	return &exitError{exitUsage, fmt.Errorf(format, args...)}
}

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
	dsns := append([]string{os.Getenv("DATABASE_URL"), os.Getenv("BATON_LISTEN_DATABASE_URL")}, databaseURLArgs(args)...)
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
			code = exitFailure
		}
	}()
	root, g := newRoot()
	g.redactor = red
	root.SetArgs(args)
	root.SetOut(os.Stdout)
	root.SetErr(stderr)
	ctx, stop := interrupt.Context()
	defer stop()
	err := root.ExecuteContext(ctx)
	if err == nil {
		err = g.notReplicated()
	}
	if err == nil {
		return 0
	}
	if g.logger != nil && g.logFormat == "json" {
		g.logger.Error("command failed", "event", "error", "error", dberr.Message(err))
	} else {
		fmt.Fprintln(stderr, "worker:", dberr.Message(err))
	}
	return exitCode(err)
}

// exitCode maps an error to the documented exit codes: the code an
// exitError carries, else the first row of exitCodes that matches.
func exitCode(err error) int {
	if ee, ok := errors.AsType[*exitError](err); ok {
		return ee.code
	}
	for _, row := range exitCodes {
		if row.matches(err) {
			return row.code
		}
	}
	return exitFailure
}

// exitCodes maps the typed errors of the packages the commands call to
// the exit codes README's table documents.
var exitCodes = []struct {
	code    int
	matches func(error) bool
}{
	{exitUsage, isType[*demo.UsageError]},
	// A schema that does not exist, lacks migrations or is newer than
	// this binary: the flags (--schema) or the deployment are wrong.
	{exitUsage, is(schema.ErrOutdated)},
	{exitUsage, is(schema.ErrTooNew)},
	{exitBadInput, isType[*ingest.InvalidInputError]},
	{exitIncomplete, is(distributor.ErrIncomplete)},
	{exitNotFound, is(partition.ErrNotFound)},
	{exitNotReplicated, is(dbconn.ErrNotReplicated)},
}

func is(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}

func isType[E error](err error) bool {
	_, ok := errors.AsType[E](err)
	return ok
}

// testHookGuarded, when set (by tests only), runs once standard error is
// guarded, before the command.
var testHookGuarded func()

// databaseURLArgs returns the values given to --database-url and
// --listen-database-url in args, so that they are redacted even when flag
// parsing fails.
func databaseURLArgs(args []string) []string {
	var urls []string
	for i, a := range args {
		for _, flag := range []string{"--database-url", "--listen-database-url"} {
			if v, ok := strings.CutPrefix(a, flag+"="); ok {
				urls = append(urls, v)
			} else if a == flag && i+1 < len(args) {
				urls = append(urls, args[i+1])
			}
		}
	}
	return urls
}

func newRoot() (*cobra.Command, *globals) {
	g := &globals{}
	root := &cobra.Command{
		Use:   "worker",
		Short: "baton: database-coordinated batch pricing workers",
		Long: `baton distributes batch pricing over many identical worker processes that
share one PostgreSQL database and nothing else.

Each command's help says whether it changes the database or writes files;
"demo" and "schedule demo" never touch the database DATABASE_URL names.

` + exitCodesHelp,
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
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{exitUsage, err} })
	g.register(root)
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
		var ee *exitError
		if errors.As(err, &ee) {
			return err
		}
		if err != nil {
			return &exitError{exitUsage, fmt.Errorf("%s: %w; see %s --help", cmd.CommandPath(), err, cmd.CommandPath())}
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
