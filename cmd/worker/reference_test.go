package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

var updateReference = flag.Bool("update-reference", false, "rewrite docs/cli-reference.md from the commands")

const referencePath = "../../docs/cli-reference.md"

// docs/cli-reference.md is generated from the commands and their flags,
// so it cannot drift from them: this test fails when it differs, and
// go test ./cmd/worker -run TestCLIReference -update-reference rewrites it.
func TestCLIReferenceIsCurrent(t *testing.T) {
	root, _ := newRoot()
	var b strings.Builder
	b.WriteString("# worker: every command and flag\n\n")
	b.WriteString("Generated from the commands themselves (`go test ./cmd/worker -run TestCLIReference -update-reference`);\n")
	b.WriteString("a test fails when it differs from them. What the commands are for: [cli.md](cli.md).\n\n")
	b.WriteString("## Global flags\n\nEvery command takes these.\n\n")
	flagTable(&b, root.PersistentFlags())
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" || sub.Name() == "completion" {
				continue
			}
			fmt.Fprintf(&b, "## %s\n\n%s.\n\n```\n%s\n```\n\n", sub.CommandPath(), strings.TrimSuffix(sub.Short, "."), sub.UseLine())
			if sub.HasAvailableLocalFlags() {
				flagTable(&b, sub.LocalNonPersistentFlags())
			}
			walk(sub)
		}
	}
	walk(root)
	got := strings.TrimRight(b.String(), "\n") + "\n"
	if *updateReference {
		if err := os.WriteFile(referencePath, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatalf("reading %s: %v (the -update-reference flag writes it)", referencePath, err)
	}
	if string(want) != got {
		t.Errorf("%s differs from the commands: run go test ./cmd/worker -run TestCLIReference -update-reference and review the difference", referencePath)
	}
}

func flagTable(b *strings.Builder, fs *pflag.FlagSet) {
	b.WriteString("| flag | default | meaning |\n|---|---|---|\n")
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Name == "help" {
			return
		}
		name := "`--" + f.Name + "`"
		if f.Shorthand != "" {
			name = "`-" + f.Shorthand + "`, " + name
		}
		def := f.DefValue
		switch {
		case def == "" || def == "[]":
			def = "—"
		case f.Name == "pg-dir":
			def = "(per user)" // depends on the machine it runs on
		default:
			def = "`" + def + "`"
		}
		fmt.Fprintf(b, "| %s | %s | %s |\n", name, def, strings.ReplaceAll(f.Usage, "|", "\\|"))
	})
	b.WriteString("\n")
}
