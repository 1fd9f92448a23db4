package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// What a command's --help must say about the user's data.
const (
	changesDatabase = "Changes the database"
	neverTouches    = "Never touches the database named by DATABASE_URL"
)

var writesFiles = regexp.MustCompile(`Writes (a file|files)`)

// Every command that can change a user's database or write files says so
// in its --help; the demos say they never touch the database DATABASE_URL
// names; the read-only commands claim neither. A new command must be
// classified here.
func TestHelpSaysWhichCommandsChangeData(t *testing.T) {
	t.Parallel()
	type claims struct{ database, files, demo bool }
	var (
		readOnly = claims{}
		database = claims{database: true}
		file     = claims{files: true}
		both     = claims{database: true, files: true}
		demo     = claims{files: true, demo: true}
	)
	want := map[string]claims{
		"migrate":             database,
		"load":                both, // and --reject-file
		"run":                 database,
		"export":              file,
		"status":              readOnly,
		"retry":               database,
		"pause":               database,
		"resume":              database,
		"prune":               database,
		"seed":                both, // files, and the database with --load
		"demo":                demo,
		"probe":               readOnly,
		"schedule add":        database,
		"schedule list":       readOnly,
		"schedule remove":     database,
		"schedule trigger":    database,
		"schedule demo":       demo,
		"ui":                  database, // with --ui-token
		"reprice":             database,
		"generations":         readOnly, // and its commands:
		"generations approve": database,
		"generations discard": database,
		"diff":                file,     // with --out
		"signals":             database, // backlog samples
	}
	root, _ := newRoot()
	seen := map[string]bool{}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
			path := strings.TrimPrefix(sub.CommandPath(), root.Name()+" ")
			if _, classified := want[path]; sub.HasSubCommands() && !classified {
				continue // a group: its commands speak for themselves
			}
			seen[path] = true
			w, ok := want[path]
			if !ok {
				t.Errorf("worker %s: not classified here: does it change the database or write files?", path)
				continue
			}
			t.Run(path, func(t *testing.T) {
				args := append(strings.Fields(path), "--help")
				out, errs, code := cli{t, ""}.run(args...)
				if code != 0 {
					t.Fatalf("worker %s: exit %d\n%s", strings.Join(args, " "), code, errs)
				}
				if got := strings.Contains(out, changesDatabase); got != w.database {
					t.Errorf("worker %s --help: says %q: %v, want %v\n%s", path, changesDatabase, got, w.database, out)
				}
				if got := writesFiles.MatchString(out); got != w.files {
					t.Errorf("worker %s --help: says it writes files: %v, want %v\n%s", path, got, w.files, out)
				}
				if got := strings.Contains(out, neverTouches); got != w.demo {
					t.Errorf("worker %s --help: says %q: %v, want %v\n%s", path, neverTouches, got, w.demo, out)
				}
			})
		}
	}
	walk(root)
	for path := range want {
		if !seen[path] {
			t.Errorf("worker %s: classified here but no such command", path)
		}
	}
}
