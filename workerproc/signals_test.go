package workerproc_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/backlog"
	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/workerproc"
)

// A signals process refuses an impossible backlog configuration, serves
// the backlog and horizon metrics until cancelled, then stops serving.
func TestSignals(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	logs := &lockedBuffer{}
	cfg := workerproc.SignalsConfig{DB: db, Backlog: backlog.Config{SampleEvery: time.Second}, HorizonWarnAfter: time.Minute,
		MetricsAddr: freeAddr(t), Ready: func(context.Context) error { return nil }, Logger: slog.New(slog.NewTextHandler(logs, nil))}
	bad := cfg
	bad.Backlog.DrainTarget = -time.Second
	if _, err := workerproc.NewSignals(bad); err == nil {
		t.Fatal("a negative drain target was accepted")
	}
	s, err := workerproc.NewSignals(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	// Serving starts in Run's goroutine: wait for the first scrape.
	testutil.Eventually(t, 30*time.Second, "the horizon metrics", func() error {
		resp, err := http.Get("http://" + cfg.MetricsAddr + "/metrics")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && !strings.Contains(string(b), "baton_xmin_horizon_age_seconds") {
			err = fmt.Errorf("/metrics lacks the horizon:\n%s\nlogs:\n%s", b, logs)
		}
		return err
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := http.Get("http://" + cfg.MetricsAddr + "/metrics"); err == nil {
		t.Fatal("still serving after Run returned")
	}
}
