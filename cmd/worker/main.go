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
	"os"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/internal/buildinfo"
	"github.com/batonhq/baton/internal/clienv"
	"github.com/batonhq/baton/internal/cliflags"
)

func main() {
	os.Exit(execute(os.Args[1:]))
}

// execute runs the CLI and returns its exit code (clienv.Execute: no
// database password can appear in what it writes to stderr).
func execute(args []string) int {
	return clienv.Execute(args, func() (*cobra.Command, *clienv.Env) {
		root, g := newRoot()
		return root, g.Env
	}, testHookGuarded)
}

// testHookGuarded, when set (by tests only), runs once standard error is
// guarded, before the command.
var testHookGuarded func()

func newRoot() (*cobra.Command, *globals) {
	g := &globals{Env: &clienv.Env{}}
	root := &cobra.Command{
		Use:           "worker",
		Short:         "baton: database-coordinated batch pricing workers",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := cliflags.Check(cmd); err != nil {
				return usageError("%v", err)
			}
			return g.setup(cmd)
		},
	}
	root.Version = buildinfo.Version("worker")
	root.SetVersionTemplate("{{.Version}}")
	g.Register(root.PersistentFlags())
	root.AddCommand(
		newMigrateCmd(g), newLoadCmd(g), newRunCmd(g), newExportCmd(g),
		newStatusCmd(g), newRetryCmd(g), newPauseCmd(g), newResumeCmd(g), newSeedCmd(g), newDemoCmd(g), newProbeCmd(g),
		newScheduleCmd(g),
		newUICmd(g), newSignalsCmd(g),
		newPruneCmd(g),
		newRepriceCmd(g), newGenerationsCmd(g), newDiffCmd(g),
	)
	// Without a command there is nothing to do: show the help and fail
	// as a usage error, as for an unknown command; wrong arguments are
	// usage errors (exit 2) for every command.
	clienv.UsageErrors(root)
	if err := applyHelp(root); err != nil {
		panic(err) // a help file missing from this binary: TestHelpFiles
	}
	return root, g
}
