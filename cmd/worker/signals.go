package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/backlog"
	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/cliflags"
	"github.com/batonhq/baton/workerproc"
)

func newSignalsCmd(g *globals) *cobra.Command {
	var addr string
	var drainTarget, sampleEvery, warnAfter time.Duration
	cmd := &cobra.Command{
		Use:   "signals --metrics-addr ADDR",
		Short: "Serve the backlog, lag, drain and horizon metrics without pricing (for autoscalers and alerts)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, err := g.OpenWaiting(cmd.Context(), dbconn.Options{MaxOpenConns: 2}, 5*time.Minute)
			if err != nil {
				return err
			}
			defer db.Close()
			s, err := workerproc.NewSignals(workerproc.SignalsConfig{DB: db, MetricsAddr: addr, HorizonWarnAfter: warnAfter,
				Backlog: backlog.Config{Schema: g.schema, DrainTarget: drainTarget, SampleEvery: sampleEvery},
				Ready:   g.Ready(db), Logger: g.Logger})
			if err != nil {
				return usageError("%v", err)
			}
			return s.Run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&addr, "metrics-addr", "", "serve /metrics, /healthz and /readyz on this address (e.g. 0.0.0.0:9091)")
	cliflags.DrainTarget(cmd.Flags(), &drainTarget)
	cmd.Flags().DurationVar(&sampleEvery, "sample-every", backlog.SampleEveryDefault, "interval between readings of the backlog (and stored samples of it)")
	cliflags.HorizonWarnAfter(cmd.Flags(), &warnAfter)
	_ = cmd.MarkFlagRequired("metrics-addr")
	cliflags.Positive(cmd.Flags(), "sample-every")
	return cmd
}
