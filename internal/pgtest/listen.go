package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/batonhq/baton/internal/testutil"
)

// Listener is a connection of its own that LISTENs on one channel, for a
// test to read the notifications the code under test sends.
type Listener struct {
	t    testing.TB
	conn *pgx.Conn
}

// Listen connects to dsn and LISTENs on channel, until the test ends.
func Listen(t testing.TB, dsn, channel string) *Listener {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connecting to listen on %s: %v", channel, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		t.Fatalf("listening on %s: %v", channel, err)
	}
	return &Listener{t: t, conn: conn}
}

// Next returns the next notification's payload, and fails the test if none
// comes within WaitTimeout(10s).
func (l *Listener) Next() string {
	l.t.Helper()
	limit := testutil.WaitTimeout(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	n, err := l.conn.WaitForNotification(ctx)
	if err != nil {
		l.t.Fatalf("waiting for a notification (up to %s): %v", limit, err)
	}
	return n.Payload
}

// Drain discards the notifications received so far: every one that comes
// within quiet of the one before.
func (l *Listener) Drain(quiet time.Duration) {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), quiet)
		_, err := l.conn.WaitForNotification(ctx)
		cancel()
		if err != nil {
			return
		}
	}
}
