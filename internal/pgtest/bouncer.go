package pgtest

import (
	"context"
	"errors"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/batonhq/baton/internal/pglocal"
)

// RequireBouncerEnv, set to 1, makes a test that needs PgBouncer fail where
// it is not installed instead of skipping.
const RequireBouncerEnv = "BATON_REQUIRE_PGBOUNCER"

// Bouncer starts PgBouncer in transaction pooling mode in front of the
// test server (StartBouncer) and returns the URL of dsn's database through
// it.
func Bouncer(t testing.TB, dsn string) string {
	t.Helper()
	return BouncerURL(t, StartBouncer(t), dsn)
}

// StartBouncer starts PgBouncer in transaction pooling mode in front of the
// test server, stopped when t ends (with its log, when t failed). Without
// PgBouncer installed t is skipped, unless BATON_REQUIRE_PGBOUNCER=1.
func StartBouncer(t testing.TB) *pglocal.Bouncer {
	t.Helper()
	b, err := pglocal.StartBouncer(context.Background(), Server(t))
	if errors.Is(err, pglocal.ErrNoPgBouncer) && os.Getenv(RequireBouncerEnv) != "1" {
		t.Skip(err, "("+RequireBouncerEnv+"=1 makes this a failure)")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pgbouncer log:\n%s", b.Log())
		}
		b.Stop()
	})
	return b
}

// BouncerURL is the URL of dsn's database through b.
func BouncerURL(t testing.TB, b *pglocal.Bouncer, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return b.URL(strings.TrimPrefix(u.Path, "/"))
}
