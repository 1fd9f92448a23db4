package clienv

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/pricing/pricingschema"
)

func TestMain(m *testing.M) { pgtest.Main(m, pricingschema.Set) }

// Without flags, the database URL and schema come from the environment,
// and what the logger writes never shows the URL's password.
func TestSetupFromEnvironmentRedacts(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://baton:s3cret-pw@db.example/baton")
	t.Setenv("BATON_SCHEMA", "pricing_a")
	var stderr bytes.Buffer
	e := &Env{LogFormat: "json", LogLevel: "info"}
	if err := e.Setup(&bytes.Buffer{}, &stderr); err != nil {
		t.Fatal(err)
	}
	if e.Schema != "pricing_a" || !strings.Contains(e.DatabaseURL, "db.example") {
		t.Fatalf("schema %q, URL %q: not taken from the environment", e.Schema, e.DatabaseURL)
	}
	e.Logger.Info("connecting", "url", e.DatabaseURL)
	e.ReportError(&stderr, errors.New("dialing "+e.DatabaseURL+": refused"))
	if strings.Contains(stderr.String(), "s3cret-pw") || !strings.Contains(stderr.String(), `"event":"error"`) {
		t.Errorf("stderr shows the password or lacks the error event:\n%s", stderr.String())
	}
}

// Bad global flags are usage errors naming the flag.
func TestSetupRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  Env
		want string
	}{
		{Env{Schema: "pg_mine", LogFormat: "text", LogLevel: "info"}, "--schema"},
		{Env{Schema: "baton", LogFormat: "text", LogLevel: "loud"}, "--log-level"},
		{Env{Schema: "baton", LogFormat: "xml", LogLevel: "info"}, "--log-format"},
	} {
		err := tc.env.Setup(&bytes.Buffer{}, &bytes.Buffer{})
		if ExitCode(err) != ExitUsage || !strings.Contains(fmtErr(err), tc.want) {
			t.Errorf("Setup(%+v) = %v, want a usage error naming %s", tc.env, err, tc.want)
		}
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestDatabaseURLArgs(t *testing.T) {
	t.Parallel()
	got := DatabaseURLArgs([]string{"run", "--database-url", "postgres://a", "--listen-database-url=postgres://b", "--database-url"})
	if want := []string{"postgres://a", "postgres://b"}; !slices.Equal(got, want) {
		t.Errorf("DatabaseURLArgs = %q, want %q", got, want)
	}
}

func setUp(t *testing.T, url string) *Env {
	t.Helper()
	e := &Env{DatabaseURL: url, LogFormat: "text", LogLevel: "error"}
	if err := e.Setup(&bytes.Buffer{}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	return e
}

// Open refuses what the flags got wrong as usage errors, which no wait
// cures, and a database without baton's schema.
func TestOpenRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if _, err := setUp(t, "").Open(ctx, dbconn.Options{}, true); !errors.Is(err, ErrNoDatabase) || ExitCode(err) != ExitUsage {
		t.Errorf("no URL: %v, want ErrNoDatabase, exit 2", err)
	}
	// A malformed URL fails at once, however long the wait.
	start := time.Now()
	if _, err := setUp(t, "postgres://%zz").OpenWaiting(ctx, dbconn.Options{}, time.Hour); ExitCode(err) != ExitUsage {
		t.Errorf("malformed URL: %v, want exit 2", err)
	}
	if d := time.Since(start); d > time.Minute {
		t.Errorf("a malformed URL was waited for (%s)", d)
	}
	if _, err := setUp(t, pgtest.NewEmptyURL(t)).Open(ctx, dbconn.Options{}, true); ExitCode(err) != ExitUsage {
		t.Errorf("database without the schema: %v, want exit 2", err)
	}
}

// A migrated database opens; it is ready, and a command that changed
// nothing has no unconfirmed commits.
func TestOpenReady(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setUp(t, pgtest.NewURL(t))
	db, err := e.OpenWaiting(ctx, dbconn.Options{MaxOpenConns: 1}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := e.Ready(db)(ctx); err != nil {
		t.Errorf("Ready: %v", err)
	}
	if err := e.NotReplicated(); err != nil {
		t.Errorf("NotReplicated: %v", err)
	}
	db.Close()
	if err := e.Ready(db)(ctx); err == nil || !strings.Contains(err.Error(), "database unreachable") {
		t.Errorf("Ready on a closed handle: %v, want database unreachable", err)
	}
}
