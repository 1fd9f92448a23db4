package main

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/internal/cliflags"
)

// newProbeCmd is a health check for minimal container images: it GETs a URL
// (normally a worker's /readyz or /healthz) and exits 0 only on 200.
func newProbeCmd(g *globals) *cobra.Command {
	var timeout time.Duration
	var verbose bool
	cmd := &cobra.Command{
		Use:   "probe URL",
		Short: "Exit 0 if URL answers 200 (container health checks: /healthz, /readyz)",
		Long: `probe GETs URL and exits 0 if it answers 200, 1 otherwise. It prints the
response's status line ("200 OK"); --verbose adds the response body (the
first 64 KiB), which for /readyz says why a worker is not ready.

It only reads: neither the database nor files are changed.`,
		Example: `  worker probe http://127.0.0.1:9090/readyz
  worker probe --timeout 1s http://127.0.0.1:9090/healthz
  worker probe --verbose http://127.0.0.1:9090/readyz`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			target := redactedURL(args[0])
			client := &http.Client{Timeout: timeout}
			resp, err := client.Get(args[0])
			if err != nil {
				return fmt.Errorf("probing %s: %w", target, err)
			}
			defer resp.Body.Close()
			var body []byte
			if verbose {
				body, _ = io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			}
			if resp.StatusCode != http.StatusOK {
				if verbose && len(body) > 0 {
					return fmt.Errorf("probing %s: %s\n%s", target, resp.Status, body)
				}
				return fmt.Errorf("probing %s: %s (--verbose shows the response)", target, resp.Status)
			}
			fmt.Fprintln(g.stdout, resp.Status)
			if verbose {
				_, _ = g.stdout.Write(body)
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "request timeout")
	cmd.Flags().BoolVar(&verbose, "verbose", false, "also print the response body")
	cliflags.Positive(cmd.Flags(), "timeout")
	return cmd
}

// redactedURL is rawURL with any password replaced by "xxxxx".
func redactedURL(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "the URL given"
	}
	return u.Redacted()
}
