package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/internal/cliflags"
	"github.com/batonhq/baton/internal/probe"
)

// newProbeCmd is the health check for minimal container images (package
// probe).
func newProbeCmd(g *globals) *cobra.Command {
	var timeout time.Duration
	var verbose bool
	cmd := &cobra.Command{
		Use:   "probe URL",
		Short: "Exit 0 if URL answers 200 (container health checks: /healthz, /readyz)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			status, body, err := probe.Get(cmd.Context(), args[0], timeout, verbose)
			if err != nil {
				return err
			}
			fmt.Fprintln(g.stdout, status)
			_, _ = g.stdout.Write(body)
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "request timeout")
	cmd.Flags().BoolVar(&verbose, "verbose", false, "also print the response body")
	cliflags.Positive(cmd.Flags(), "timeout")
	return cmd
}
