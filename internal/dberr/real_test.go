package dberr

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/goleak"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/schema"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.WithServer(m)) }

// classes are the answers of every classifier for one error.
type classes struct {
	transient, unknown, tooLong, unreachable, refuses, worthWaiting bool
}

func classify(err error) classes {
	return classes{Transient(err), UnknownOutcome(err), TooLong(err), Unreachable(err), RefusesClient(err), WorthWaiting(err)}
}

// closedAddr returns an address nothing listens on: one that did a moment
// ago.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// withURL returns dsn with its user or database changed.
func withURL(t *testing.T, dsn string, edit func(u *url.URL)) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	edit(u)
	return u.String()
}

// The classifiers on errors produced by a real server, real connections
// and real contexts, not built by hand: what pgx and the network actually
// return is what is classified.
func TestClassifiersOnRealErrors(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewURL(t)
	ctx := context.Background()
	connect := func(t *testing.T, dsn string) *pgconn.PgConn {
		t.Helper()
		c, err := pgconn.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	exec := func(ctx context.Context, c *pgconn.PgConn, sql string) error {
		_, err := c.Exec(ctx, sql).ReadAll()
		return err
	}
	for _, tc := range []struct {
		name string
		make func(t *testing.T) error
		want classes
	}{
		{"connection refused", func(t *testing.T) error {
			_, err := pgconn.Connect(ctx, "postgres://baton@"+closedAddr(t)+"/baton?sslmode=disable&connect_timeout=5")
			return err
		}, classes{transient: true, unknown: true, unreachable: true, worthWaiting: true}},
		{"dial refused, without pgx", func(t *testing.T) error {
			_, err := net.Dial("tcp", closedAddr(t))
			return fmt.Errorf("dialing: %w", err)
		}, classes{transient: true, unknown: true, unreachable: true, worthWaiting: true}},
		{"unknown database 3D000", func(t *testing.T) error {
			_, err := pgconn.Connect(ctx, withURL(t, dsn, func(u *url.URL) { u.Path = "/no_such_database" }))
			return err
		}, classes{unknown: false, refuses: true}},
		{"unknown role 28000", func(t *testing.T) error {
			_, err := pgconn.Connect(ctx, withURL(t, dsn, func(u *url.URL) { u.User = url.User("no_such_role") }))
			return err
		}, classes{refuses: true}},
		{"statement timeout 57014", func(t *testing.T) error {
			c := connect(t, dsn)
			return exec(ctx, c, "SET statement_timeout = 10; SELECT pg_sleep(5)")
		}, classes{transient: true, tooLong: true, worthWaiting: true}},
		{"unique violation 23505", func(t *testing.T) error {
			c := connect(t, dsn)
			return exec(ctx, c, "CREATE TEMP TABLE u (k int PRIMARY KEY); INSERT INTO u VALUES (1), (1)")
		}, classes{worthWaiting: true}},
		{"session terminated 57P01", func(t *testing.T) error {
			c := connect(t, dsn)
			other := connect(t, dsn)
			if err := exec(ctx, other, fmt.Sprintf("SELECT pg_terminate_backend(%d)", c.PID())); err != nil {
				t.Fatal(err)
			}
			return exec(ctx, c, "SELECT 1")
		}, classes{transient: true, unknown: false, unreachable: true, worthWaiting: true}},
		{"closed connection", func(t *testing.T) error {
			c := connect(t, dsn)
			c.Close(ctx)
			return exec(ctx, c, "SELECT 1")
		}, classes{transient: true, unknown: true, unreachable: true, worthWaiting: true}},
		{"context deadline", func(t *testing.T) error {
			c := connect(t, dsn)
			dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			return exec(dctx, c, "SELECT pg_sleep(5)")
		}, classes{transient: true, unknown: true, tooLong: true, unreachable: true, worthWaiting: true}},
		{"context cancelled", func(t *testing.T) error {
			c := connect(t, dsn)
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			return exec(cctx, c, "SELECT 1")
		}, classes{transient: true, unknown: true}}, // transient: a batch cut short by a stop is not its failure
		{"schema outdated", func(t *testing.T) error {
			return fmt.Errorf("checking schema: %w", schema.ErrOutdated)
		}, classes{unknown: true, worthWaiting: true}},
		{"schema missing", func(t *testing.T) error {
			return fmt.Errorf("checking schema: %w", &schema.MissingError{Schema: "nosuch"})
		}, classes{unknown: true}}, // outdated, but no migration under way will create it
		{"schema too new", func(t *testing.T) error {
			return fmt.Errorf("checking schema: %w", schema.ErrTooNew)
		}, classes{unknown: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.make(t)
			if err == nil {
				t.Fatal("no error")
			}
			if got := classify(err); got != tc.want {
				t.Errorf("%T %v:\n got %+v\nwant %+v", err, err, got, tc.want)
			}
		})
	}
}
