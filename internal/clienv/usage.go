package clienv

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
)

// UsageErrors makes what the command line got wrong a usage error (exit 2)
// everywhere in root's tree: a bad flag, wrong arguments, an unknown
// command, and a command group run without its subcommand, which also
// shows the group's help ("a command is required" for root).
func UsageErrors(root *cobra.Command) {
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return Exit(ExitUsage, err) })
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if c.Args != nil {
			c.Args = usageArgs(c.Args)
		}
		if !c.Runnable() && c.HasSubCommands() {
			c.Args = usageArgs(noUnknownCommand)
			c.RunE = needsSubcommand
		}
	}
	walk(root)
}

// needsSubcommand is the run of a command group: its help, on stderr, and
// a usage error.
func needsSubcommand(cmd *cobra.Command, _ []string) error {
	cmd.SetOut(cmd.ErrOrStderr())
	_ = cmd.Help()
	if !cmd.HasParent() {
		return UsageError("a command is required")
	}
	return UsageError("%s needs a subcommand", cmd.CommandPath())
}

// usageArgs makes the errors of an argument check usage errors.
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		err := check(cmd, args)
		if _, ok := errors.AsType[*ExitError](err); ok || err == nil {
			return err
		}
		return Exit(ExitUsage, fmt.Errorf("%s: %w; see %s --help", cmd.CommandPath(), err, cmd.CommandPath()))
	}
}

// noUnknownCommand refuses arguments to a command that only has subcommands.
func noUnknownCommand(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return UsageError("unknown command %q; see %s --help", args[0], cmd.CommandPath())
	}
	return nil
}
