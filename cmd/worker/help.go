package main

import (
	"embed"
	"fmt"
	"strings"
	"text/template"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/console"
	"github.com/batonhq/baton/internal/clienv"
	"github.com/batonhq/baton/internal/report/text"
)

// Each command's description and examples are a text file in help/, named
// by the command's path below worker ("run.txt", "schedule_add.txt";
// "worker.txt" for worker itself): prose, reviewed as prose, which
// "worker CMD --help" shows and docs/cli.md (generated from the commands)
// prints. A file is the description, then, after a line "Examples:", the
// examples (a blank line before it). A file names the tables and names
// defined in the code as {{.Name}} (helpData). TestHelpFiles checks that every command has its file and every
// file its command, and that every example is a command line the command
// it illustrates accepts.
//
//go:embed help/*.txt
var helpFiles embed.FS

// exampleMarker is the line that ends a help file's description and
// begins its examples.
const exampleMarker = "Examples:"

// helpName is the name of c's help file, without ".txt".
func helpName(c *cobra.Command) string {
	if !c.HasParent() {
		return c.Name()
	}
	path := strings.Fields(c.CommandPath())[1:]
	return strings.Join(path, "_")
}

// helpData are the texts a help file names as {{.Name}}: tables and names
// whose one definition is in the code.
func helpData() map[string]string {
	return map[string]string{
		"ExitCodes":  clienv.ExitCodesHelp,
		"States":     text.StatesHelp,
		"DiffHeader": text.DiffHeader,
		"TokenEnv":   console.TokenEnv,
	}
}

// applyHelp sets the description and examples of root and every command
// below it from their help files. A command without a file is an error of
// this binary, which TestHelpFiles catches before it ships.
func applyHelp(root *cobra.Command) error {
	var apply func(c *cobra.Command) error
	apply = func(c *cobra.Command) error {
		if !c.Hidden && c.Name() != "help" && c.Name() != "completion" {
			data, err := helpFiles.ReadFile("help/" + helpName(c) + ".txt")
			if err != nil {
				return fmt.Errorf("help of %q: %w", c.CommandPath(), err)
			}
			tmpl, err := template.New(helpName(c)).Option("missingkey=error").Parse(string(data))
			if err != nil {
				return fmt.Errorf("help of %q: %w", c.CommandPath(), err)
			}
			var b strings.Builder
			if err := tmpl.Execute(&b, helpData()); err != nil {
				return fmt.Errorf("help of %q: %w", c.CommandPath(), err)
			}
			c.Long, c.Example, _ = strings.Cut(strings.TrimSuffix(b.String(), "\n"), "\n\n"+exampleMarker+"\n")
		}
		for _, s := range c.Commands() {
			if err := apply(s); err != nil {
				return err
			}
		}
		return nil
	}
	return apply(root)
}
