package main

import (
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spf13/cobra"
)

// newProbeCmd is a health check for minimal container images: it GETs a URL
// (normally a worker's /readyz or /healthz) and exits 0 only on 200.
func newProbeCmd(g *globals) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "probe URL",
		Short: "Exit 0 if URL answers 200 (container health checks: /healthz, /readyz)",
		Example: `  worker probe http://127.0.0.1:9090/readyz
  worker probe --timeout 1s http://127.0.0.1:9090/healthz`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client := &http.Client{Timeout: timeout}
			resp, err := client.Get(args[0])
			if err != nil {
				return fmt.Errorf("probing %s: %w", args[0], err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("probing %s: %s: %s", args[0], resp.Status, body)
			}
			fmt.Fprint(g.stdout, string(body))
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "request timeout")
	positive(cmd.Flags(), "timeout")
	return cmd
}
