package clienv

import (
	"fmt"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/internal/interrupt"
	"github.com/batonhq/baton/internal/redact"
)

// Execute runs the command line args on the command tree newRoot makes
// (with the Env its commands share) and returns the exit code. Everything
// it writes to stderr (errors, logs, a panic) goes through one redactor,
// so no database password can appear in it. That includes what the Go
// runtime itself writes when a goroutine other than this one panics, which
// no recover here can catch: file descriptor 2 is handed to a filter
// process (this binary again, see redact.GuardStderr) that redacts it and
// outlives the crash. onGuarded, when not nil (tests only), runs once
// stderr is guarded, before the command.
func Execute(args []string, newRoot func() (*cobra.Command, *Env), onGuarded func()) (code int) {
	if redact.ServeStderrFilter() {
		return 0
	}
	dsns := append([]string{os.Getenv("DATABASE_URL"), os.Getenv("BATON_LISTEN_DATABASE_URL")}, DatabaseURLArgs(args)...)
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
	if onGuarded != nil {
		onGuarded()
	}
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "worker: internal error: %v\n%s", r, debug.Stack())
			code = ExitFailure
		}
	}()
	root, env := newRoot()
	env.Redactor = red
	root.SetArgs(args)
	root.SetOut(os.Stdout)
	root.SetErr(stderr)
	ctx, stop := interrupt.Context()
	defer stop()
	err := root.ExecuteContext(ctx)
	if err == nil {
		err = env.NotReplicated()
	}
	if err == nil {
		return 0
	}
	env.ReportError(stderr, err)
	return ExitCode(err)
}
