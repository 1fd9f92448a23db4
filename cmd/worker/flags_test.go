package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/batonhq/baton/internal/clienv"
	"github.com/batonhq/baton/internal/cliflags"
)

// zeroAllowed lists the numeric and duration flags for which 0 means
// something (and is accepted), with the words of their help that say
// what. Every other numeric flag refuses 0. Negative and malformed values
// are refused by every flag.
var zeroAllowed = map[string]struct{ reason, help string }{
	"load --max-errors":                {"0 lists every invalid row", "0 for all"},
	"load --statement-timeout":         {"0 turns the server's limit off (README: 0 turns a limit off)", "0: no limit"},
	"load --lock-timeout":              {"0 turns the server's limit off", "0: no limit"},
	"load --idle-timeout":              {"0 turns the server's limit off", "0: no limit"},
	"run --wait-for-database":          {"0 fails at once when the database does not answer", "0: fail at once"},
	"run --batch-target":               {"0 takes the default, 1s or --stale-after/8 if shorter", "0: 1s"},
	"seed --records-per-contract":      {"0 writes contracts with their tiers and no records", "0: contracts and tiers only"},
	"seed --seed":                      {"a seed: every value gives its own data", "any value"},
	"demo --seed":                      {"a seed: every value gives its own data", "any value"},
	"demo --kill-at":                   {"0 kills no worker", "0: no kill"},
	"schedule add --lock-at-least-for": {"0 sets no minimum time between runs", "0: no minimum"},
	"prune --generations-older-than":   {"0 removes every superseded generation", "0: every one"},
	"status --limit":                   {"0 lists every contract", "0: all"},
	"run --spread-takeovers":           {"0 takes the default, 2 × the poll interval", "0: 2 × the poll interval"},
}

// negativeAllowed are the numeric flags to which a negative value means
// something, with the words their help says it in.
var negativeAllowed = map[string]string{
	"run --spread-takeovers": "negative: take every one found at once",
}

// positionalArgs are the arguments a command needs before its flags are
// looked at (cobra checks arguments first).
var positionalArgs = map[string][]string{
	"probe":            {"http://127.0.0.1:1/readyz"},
	"retry":            {"c1"},
	"schedule add":     {"x", "--builtin", "verify"},
	"schedule remove":  {"x"},
	"schedule trigger": {"x"},
}

// Every numeric or duration flag of every command refuses zero (unless
// documented above), negative and malformed values with exit 2 and a
// message naming the flag, before anything else happens.
func TestEveryNumericFlagRefusesZeroNegativeAndMalformedValues(t *testing.T) {
	t.Parallel()
	root, _ := newRoot()
	type flagCase struct {
		path string // command path without "worker"
		flag *pflag.Flag
	}
	var flags []flagCase
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if !c.Runnable() || c.HasSubCommands() {
			return
		}
		path := strings.TrimPrefix(c.CommandPath(), root.Name()+" ")
		c.Flags().VisitAll(func(fl *pflag.Flag) {
			if cliflags.Numeric(fl.Value.Type()) {
				flags = append(flags, flagCase{path, fl})
			}
		})
		c.InheritedFlags().VisitAll(func(fl *pflag.Flag) {
			if cliflags.Numeric(fl.Value.Type()) {
				flags = append(flags, flagCase{path, fl})
			}
		})
	}
	walk(root)
	if len(flags) < 25 {
		t.Fatalf("found only %d numeric flags: is the walk broken?", len(flags))
	}
	seen := map[string]bool{}
	for _, fc := range flags {
		key := fc.path + " --" + fc.flag.Name
		seen[key] = true
		if !cliflags.Annotated(fc.flag) {
			t.Errorf("worker %s: no range annotation (positive, nonNegative, atLeast or anyValue)", key)
		}
		zero, neg := "0", "-1"
		if fc.flag.Value.Type() == "duration" {
			zero, neg = "0s", "-1s"
		}
		values := map[string]string{"zero": zero, "negative": neg, "malformed": "x1"}
		if allowed, ok := zeroAllowed[key]; ok {
			delete(values, "zero") // it would run the command
			if !strings.Contains(fc.flag.Usage, allowed.help) {
				t.Errorf("worker %s: 0 is accepted (%s) but its help does not say so with %q: %q", key, allowed.reason, allowed.help, fc.flag.Usage)
			}
		}
		if help, ok := negativeAllowed[key]; ok {
			delete(values, "negative") // it would run the command
			if !strings.Contains(fc.flag.Usage, help) {
				t.Errorf("worker %s: a negative value is accepted but its help does not say so with %q: %q", key, help, fc.flag.Usage)
			}
		}
		for name, v := range values {
			t.Run(strings.ReplaceAll(key, " ", "_")+"/"+name, func(t *testing.T) {
				t.Parallel()
				args := append(strings.Fields(fc.path), "--"+fc.flag.Name+"="+v)
				args = append(args, positionalArgs[fc.path]...)
				out, errs, code := runBounded(t, args...)
				if code != clienv.ExitUsage || !strings.Contains(errs, "--"+fc.flag.Name) {
					t.Fatalf("worker %s: exit %d, want %d with --%s named in the message\nstdout: %s\nstderr: %s",
						strings.Join(args, " "), code, clienv.ExitUsage, fc.flag.Name, out, errs)
				}
			})
		}
	}
	for key := range zeroAllowed {
		if !seen[key] {
			t.Errorf("zeroAllowed lists %q, which is no numeric flag of any command", key)
		}
	}
}

// runBounded runs the CLI against a database that does not answer, so
// that a value that slipped through fails (exit 1) rather than doing
// work, and gives up after a minute.
func runBounded(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), "BATON_RUN_AS_WORKER=1", "DATABASE_URL=postgres://baton@127.0.0.1:1/nowhere?connect_timeout=1")
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("worker %s: still running after a minute\n%s%s", strings.Join(args, " "), out.String(), errb.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// Values the range checks let through but the command cannot use are
// refused in the flags' words too, never in a library's field names.
func TestFlagMessagesNameTheFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--event-retention", "0"}, "--event-retention must be greater than zero, got 0s"},
		{[]string{"run", "--event-retention", "-1h"}, "--event-retention must be greater than zero, got -1h0m0s"},
		{[]string{"run", "--mode", "auto"}, `--mode must be lock or leader, got "auto"`},
		{[]string{"run", "--mode", "leader", "--until-done"}, "--until-done needs --mode lock"},
		{[]string{"run", "--id", "a#b"}, `--id "a#b" must not contain "#"`},
		{[]string{"run", "--heartbeat", "1s", "--stale-after", "2s"}, "--stale-after (2s) must be at least 3 × --heartbeat (1s)"},
		{[]string{"probe", "--timeout", "0", "http://127.0.0.1:1/"}, "--timeout must be greater than zero, got 0s"},
		{[]string{"load", "--records", "r.csv", "--idle-timeout", "-1s"}, "--idle-timeout must not be negative, got -1s"},
		{[]string{"schedule", "add", "x", "--every", "0s", "--builtin", "verify"}, "--every must be at least 1s, got 0s"},
		{[]string{"schedule", "add", "x", "--every", "1ms", "--builtin", "verify"}, "--every must be at least 1s, got 1ms"},
		{[]string{"schedule", "add", "x", "--every", "1h", "--lock-at-most-for", "0", "--builtin", "verify"}, "--lock-at-most-for must be at least 1ms, got 0s"},
		{[]string{"schedule", "add", "x", "--builtin", "verify"}, "--every and --cron: give one (an interval or a cron expression)"},
		{[]string{"schedule", "add", "x", "--every", "1h", "--cron", "@daily", "--builtin", "verify"}, "--every and --cron: give one, not both"},
		{[]string{"schedule", "add", "x", "--cron", "61 * * * *", "--builtin", "verify"}, `--cron "61 * * * *"`},
		{[]string{"schedule", "add", "x", "--every", "1h", "--mode", "auto", "--builtin", "verify"}, `--mode "auto": want lock, expire or leader`},
		{[]string{"schedule", "add", "x", "--every", "1h", "--missed", "all", "--builtin", "verify"}, `--missed "all": want skip or catch-up`},
		{[]string{"schedule", "add", "x", "--every", "1h", "--builtin", "nope"}, `--builtin "nope": no such built-in job`},
		{[]string{"schedule", "demo", "--workers", "2"}, "--workers must be at least 3, got 2"},
		{[]string{"demo", "--kill-at", "1"}, "--kill-at must be below 1"},
		{[]string{"demo", "--kill-at", "NaN"}, "--kill-at must be a number, got NaN"},
		{[]string{"seed", "--shape", "pareto:1.1"}, `--shape "pareto:1.1": want uniform, zipf:S (say zipf:1.1) or hot:F (say hot:0.5)`},
		{[]string{"seed", "--shape", "zipf"}, `--shape "zipf": want zipf:S`},
		{[]string{"seed", "--shape", "zipf:0"}, `--shape "zipf:0": the Zipf exponent must be a number above 0`},
		{[]string{"seed", "--shape", "hot:1"}, `--shape "hot:1": the hot contract's fraction must lie strictly between 0 and 1`},
		{[]string{"seed", "--shape", "hot:x"}, `--shape "hot:x": "x" is not a number`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			out, errs, code := runBounded(t, tc.args...)
			if code != clienv.ExitUsage || !strings.Contains(errs, tc.want) {
				t.Fatalf("worker %s: exit %d, want %d with %q\nstdout: %s\nstderr: %s", strings.Join(tc.args, " "), code, clienv.ExitUsage, tc.want, out, errs)
			}
			for _, field := range []string{"EventRetention", "Mode must", "UntilDone", "Name", "MaxListed", "exactly one of every and cron"} {
				if strings.Contains(errs, field) {
					t.Fatalf("worker %s: a configuration field's wording reaches the user (%q):\n%s", strings.Join(tc.args, " "), field, errs)
				}
			}
		})
	}
}
