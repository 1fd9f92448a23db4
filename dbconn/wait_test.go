package dbconn_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
)

var errNotYet = errors.New("connection refused")

// A database that answers on the third attempt: Wait backs off 1s, then
// 2s, says once that it waits and once that the database answered.
func TestWaitRetriesUntilTheDatabaseAnswers(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewURL(t)
	clock := clockwork.NewFakeClock()
	var logs bytes.Buffer
	attempts := 0
	var at []time.Time
	open := func(context.Context) (*dbconn.DB, error) {
		attempts++
		at = append(at, clock.Now())
		if attempts < 3 {
			return nil, errNotYet
		}
		return dbconn.Open(dsn, dbconn.Options{})
	}
	type result struct {
		db  *dbconn.DB
		err error
	}
	done := make(chan result, 1)
	go func() {
		db, err := dbconn.Wait(context.Background(), dbconn.WaitConfig{
			Timeout:   time.Minute,
			Retryable: func(err error) bool { return errors.Is(err, errNotYet) },
			Logger:    slog.New(slog.NewTextHandler(&logs, nil)),
			Clock:     clock,
		}, open)
		done <- result{db, err}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, d := range []time.Duration{time.Second, 2 * time.Second} {
		if err := clock.BlockUntilContext(ctx, 1); err != nil {
			t.Fatalf("waiting for the back-off of %s: %v", d, err)
		}
		clock.Advance(d)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("Wait: %v", r.err)
	}
	defer r.db.Close()
	if err := r.db.PingContext(ctx); err != nil {
		t.Fatalf("the database Wait returned does not answer: %v", err)
	}
	if attempts != 3 || at[1].Sub(at[0]) != time.Second || at[2].Sub(at[1]) != 2*time.Second {
		t.Fatalf("attempts at %v, want 3 attempts 1s then 2s apart", at)
	}
	out := logs.String()
	if strings.Count(out, "event=database_unreachable") != 1 || strings.Count(out, "event=database_reachable") != 1 {
		t.Fatalf("logs, want one wait and one reachable:\n%s", out)
	}
}

// An error no wait cures fails at once; a timeout ends the wait with the
// last error, before a back-off that would pass it.
func TestWaitGivesUp(t *testing.T) {
	t.Parallel()
	errBadURL := errors.New("malformed URL")
	for _, tc := range []struct {
		name     string
		timeout  time.Duration
		err      error
		attempts int
	}{
		{"not retryable", time.Minute, errBadURL, 1},
		{"no wait", 0, errNotYet, 1},
		{"timeout", 2 * time.Second, errNotYet, 2}, // 1s, then 2s would pass it
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := clockwork.NewFakeClock()
			attempts := 0
			done := make(chan error, 1)
			go func() {
				_, err := dbconn.Wait(context.Background(), dbconn.WaitConfig{
					Timeout:   tc.timeout,
					Retryable: func(err error) bool { return errors.Is(err, errNotYet) },
					Logger:    slog.New(slog.DiscardHandler),
					Clock:     clock,
				}, func(context.Context) (*dbconn.DB, error) { attempts++; return nil, tc.err })
				done <- err
			}()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for range tc.attempts - 1 {
				if err := clock.BlockUntilContext(ctx, 1); err != nil {
					t.Fatalf("waiting for the back-off: %v", err)
				}
				clock.Advance(time.Second)
			}
			if err := <-done; !errors.Is(err, tc.err) || attempts != tc.attempts {
				t.Fatalf("Wait = %v after %d attempts, want %v after %d", err, attempts, tc.err, tc.attempts)
			}
		})
	}
}
