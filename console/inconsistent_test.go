package console_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/console"
	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
)

// A partition the workload finds inconsistent (for pricing: a checkpoint
// beyond the contract's records) is shown as such, with its problem, and
// not counted as done.
func TestInconsistentPartitionsAreShownAsErrors(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewURL(t), dbconn.Options{})
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `INSERT INTO baton.tasks (partition_key, available, position) VALUES
		('c-skipped', 1509, 1509), ('c-fine', 3, 3)`); err != nil {
		t.Fatal(err)
	}
	const problem = "checkpoint 1509 beyond its 1506 stored records"
	srv, err := console.New(pgtest.Handle(db), console.Config{Addr: "127.0.0.1:0", Refresh: 200 * time.Millisecond,
		Noun: "contract", ItemUnit: "records", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Inconsistent: func(context.Context) (map[string]string, error) {
			return map[string]string{"c-skipped": problem}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Stop)
	h := httptest.NewServer(srv.Handler())
	t.Cleanup(h.Close)
	_, body := get(t, h.URL+"/contracts?state=inconsistent")
	if !strings.Contains(body, "c-skipped") || strings.Contains(body, "c-fine") || !strings.Contains(body, problem) {
		t.Fatalf("/contracts?state=inconsistent lacks c-skipped with its problem (or lists c-fine):\n%s", body)
	}
	_, body = get(t, h.URL+"/contracts?state=done")
	if strings.Contains(body, "c-skipped") || !strings.Contains(body, "c-fine") {
		t.Fatalf("/contracts?state=done lists the inconsistent contract as done:\n%s", body)
	}
}
