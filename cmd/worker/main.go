// Command worker is baton's single binary: it migrates the schema, loads
// and exports pricing data, runs distributed pricing workers, and shows
// their status.
//
// Exit codes: 0 success; 1 failure; 2 bad usage or configuration; 3 invalid
// input (nothing was loaded); 4 work left on quarantined partitions.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/ingest"
)

// Exit codes.
const (
	exitFailure    = 1
	exitUsage      = 2
	exitBadInput   = 3
	exitIncomplete = 4
)

type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageError(format string, args ...any) error {
	return &exitError{exitUsage, fmt.Errorf(format, args...)}
}

func main() {
	os.Exit(execute(os.Args[1:]))
}

func execute(args []string) int {
	root, g := newRoot()
	root.SetArgs(args)
	ctx, stop := signalContext()
	defer stop()
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	if g.logger != nil && g.logFormat == "json" {
		g.logger.Error("command failed", "event", "error", "error", err.Error())
	} else {
		fmt.Fprintln(os.Stderr, "worker:", err)
	}
	var ee *exitError
	var invalid *ingest.InvalidInputError
	switch {
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &invalid):
		return exitBadInput
	case errors.Is(err, distributor.ErrIncomplete):
		return exitIncomplete
	default:
		return exitFailure
	}
}

// signalContext is cancelled by the first SIGINT or SIGTERM, which asks
// for a graceful stop; a second one exits at once.
func signalContext() (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		select {
		case sig := <-ch:
			slog.Info("signal received: stopping gracefully (send again to exit at once)", "event", "signal", "signal", sig.String())
			cancel()
		case <-ctx.Done():
			return
		}
		sig := <-ch
		slog.Warn("second signal: exiting now", "event", "signal", "signal", sig.String())
		os.Exit(130)
	}()
	return ctx, func() { signal.Stop(ch); cancel() }
}

func newRoot() (*cobra.Command, *globals) {
	g := &globals{}
	root := &cobra.Command{
		Use:           "worker",
		Short:         "baton: database-coordinated batch pricing workers",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return g.setup(cmd)
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{exitUsage, err} })
	g.register(root)
	root.AddCommand(
		newMigrateCmd(g), newLoadCmd(g), newRunCmd(g), newExportCmd(g),
		newStatusCmd(g), newRetryCmd(g), newSeedCmd(g), newDemoCmd(g), newProbeCmd(g),
		newScheduleCmd(g),
		newUICmd(g),
	)
	return root, g
}
