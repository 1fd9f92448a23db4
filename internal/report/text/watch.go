package text

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/batonhq/baton/internal/report"
)

// Watch redraws the live view of read's status on w every interval until
// ctx ends. A failed read keeps the last view on screen under a "database
// unreachable, retrying" line and tries again at the next tick; off a
// terminal, logger says once that the database is unreachable and once
// that it is back.
func Watch(ctx context.Context, w io.Writer, logger *slog.Logger, every time.Duration, read func(context.Context) (report.Status, error)) error {
	view := NewLive(w)
	view.screen = true
	if view.tty {
		fmt.Fprint(w, "\033[?25l\033[H\033[2J") // hide the cursor, clear the screen
		defer fmt.Fprint(w, "\033[?25h")
	}
	start := time.Now()
	tick := time.NewTicker(every)
	defer tick.Stop()
	var last *report.Status
	var downSince time.Time
	for {
		s, err := read(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			if downSince.IsZero() {
				downSince = time.Now()
				if !view.tty {
					logger.Warn("database unreachable, retrying", "error", err.Error())
				}
			}
			view.alert = fmt.Sprintf("database unreachable, retrying (since %s)", downSince.Format("15:04:05"))
			if last != nil {
				view.Draw(*last, last.Totals.Processed+last.Totals.Pending, time.Since(start))
			} else if view.tty {
				view.Draw(report.Status{Totals: report.Totals{ByState: map[string]int{}}}, 0, time.Since(start))
			}
		default:
			if !downSince.IsZero() && !view.tty {
				logger.Info("database reachable again", "down_ms", time.Since(downSince).Milliseconds())
			}
			downSince, view.alert = time.Time{}, ""
			last = &s
			view.Draw(s, s.Totals.Processed+s.Totals.Pending, time.Since(start))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
