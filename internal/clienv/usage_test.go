package clienv

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// Every way of getting the command line wrong exits 2, naming what was
// wrong; a group without its subcommand shows its help.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "a command is required"},
		{[]string{"nosuch"}, `unknown command "nosuch"; see app --help`},
		{[]string{"group"}, "app group needs a subcommand"},
		{[]string{"group", "nosuch"}, `unknown command "nosuch"; see app group --help`},
		{[]string{"group", "leaf", "extra"}, "app group leaf: unknown command \"extra\""},
		{[]string{"group", "leaf", "--nosuch"}, "unknown flag: --nosuch"},
	} {
		root := &cobra.Command{Use: "app", SilenceErrors: true, SilenceUsage: true}
		group := &cobra.Command{Use: "group", Short: "a group"}
		group.AddCommand(&cobra.Command{Use: "leaf", Args: cobra.NoArgs, RunE: func(*cobra.Command, []string) error { return nil }})
		root.AddCommand(group)
		UsageErrors(root)
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(tc.args)
		err := root.Execute()
		if ExitCode(err) != ExitUsage || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("app %s: %v (exit %d), want exit 2 with %q", strings.Join(tc.args, " "), err, ExitCode(err), tc.want)
		}
	}
}
