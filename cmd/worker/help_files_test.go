package main

import (
	"io/fs"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// Every command has its help file and every help file its command; every
// example is a command line of the command it illustrates (or of one below
// it) that worker accepts: each worker command in it is found, its flags
// parse, and its arguments pass the command's check.
func TestHelpFiles(t *testing.T) {
	root, _ := newRoot()
	files := map[string]bool{}
	entries, err := fs.ReadDir(helpFiles, "help")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		files[strings.TrimSuffix(e.Name(), ".txt")] = true
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, s := range c.Commands() {
			walk(s)
		}
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			return
		}
		name := helpName(c)
		if !files[name] {
			t.Errorf("%q has no help/%s.txt", c.CommandPath(), name)
		}
		delete(files, name)
		if c.Long == "" && c.Example == "" {
			t.Errorf("%q: help/%s.txt has neither a description nor examples", c.CommandPath(), name)
		}
		for _, line := range strings.Split(c.Example, "\n") {
			ran := false
			for _, inv := range exampleRuns(t, line) {
				path := checkExample(t, line, inv)
				ran = ran || path == c.CommandPath() || strings.HasPrefix(path, c.CommandPath()+" ")
			}
			if !ran && strings.Contains(line, "worker ") {
				t.Errorf("example %q of %q runs neither it nor a command below it", line, c.CommandPath())
			}
		}
	}
	walk(root)
	for name := range files {
		t.Errorf("help/%s.txt belongs to no command", name)
	}
}

// run is one worker command of an example line: its arguments, and
// whether more come from standard input (xargs worker ...).
type run struct {
	args  []string
	xargs bool
}

// checkExample checks that an example's worker command is accepted and
// returns the path of the command it runs. Each gets a fresh command
// tree, as a process would: flags keep what they parsed.
func checkExample(t *testing.T, line string, r run) string {
	t.Helper()
	root, _ := newRoot()
	found, rest, err := root.Find(r.args)
	if err != nil {
		t.Errorf("example %q: %v", line, err)
		return ""
	}
	if err := found.ParseFlags(rest); err != nil {
		t.Errorf("example %q: %v", line, err)
		return found.CommandPath()
	}
	if err := found.ValidateArgs(found.Flags().Args()); err != nil && !r.xargs {
		t.Errorf("example %q: %v", line, err)
	}
	return found.CommandPath()
}

// exampleRuns splits an example line as a shell would (quotes, comments,
// pipes, &&, ;, redirections) and returns its worker commands.
func exampleRuns(t *testing.T, line string) []run {
	t.Helper()
	words, ok := shellWords(line)
	if !ok {
		t.Errorf("example %q: unbalanced quote", line)
		return nil
	}
	var runs []run
	var cmd []string
	flush := func() {
		for i, w := range cmd {
			if w == "worker" {
				runs = append(runs, run{args: cmd[i+1:], xargs: i > 0 && cmd[0] == "xargs"})
				break
			}
			if i == 0 && strings.Contains(w, "=") || w == "xargs" && i == 0 {
				continue // VAR=value worker ..., xargs worker ...
			}
			break
		}
		cmd = nil
	}
	redirect := false
	for _, w := range words {
		switch {
		case w == "|" || w == "&&" || w == ";" || w == "||":
			flush()
			redirect = false
		case w == ">" || w == ">>" || w == "<":
			redirect = true
		case redirect:
		default:
			cmd = append(cmd, w)
		}
	}
	flush()
	return runs
}

// shellWords splits line into words: quotes group, an unquoted # starts a
// comment; false if a quote is left open.
func shellWords(line string) ([]string, bool) {
	var words []string
	var w strings.Builder
	inWord, quote := false, rune(0)
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == '#' && !inWord:
			return append(words, flushWord(&w, inWord)...), true
		case r == ' ' || r == '\t':
			words = append(words, flushWord(&w, inWord)...)
			inWord = false
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	return append(words, flushWord(&w, inWord)...), quote == 0
}

func flushWord(w *strings.Builder, inWord bool) []string {
	if !inWord {
		return nil
	}
	s := w.String()
	w.Reset()
	return []string{s}
}

// The shell splitting of examples: quotes group words, comments end a
// line, assignments before the command are dropped, pipes and && separate
// commands, and other commands are not worker's.
func TestExampleRuns(t *testing.T) {
	for line, want := range map[string]string{
		`  worker pause c-17 --reason "tiers under review"`:                `pause c-17 --reason tiers under review`,
		`  BATON_UI_TOKEN="$(openssl rand -hex 16)" worker ui --addr x`:    `ui --addr x`,
		`  export DATABASE_URL=postgres://baton@db.example/baton`:          ``,
		`  worker schedule add j --cron '0 3 * * *' -- sh -c 'a b'`:        `schedule add j --cron 0 3 * * * -- sh -c a b`,
		`  worker status --load 7   # is load 7 present?`:                  `status --load 7`,
		`  worker run --until-done && worker export --out - | gzip > x.gz`: `run --until-done;export --out -`,
		`  worker status --json | jq -r '.x | y' | xargs worker retry`:     `status --json;retry (xargs)`,
	} {
		var got []string
		for _, r := range exampleRuns(t, line) {
			s := strings.Join(r.args, " ")
			if r.xargs {
				s += " (xargs)"
			}
			got = append(got, s)
		}
		if g := strings.Join(got, ";"); g != want {
			t.Errorf("exampleRuns(%q) = %q, want %q", line, g, want)
		}
	}
}
