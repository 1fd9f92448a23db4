package console_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/console"
	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/testutil"
)

// horizonConsole serves a console over a fresh database with the given
// warning threshold, and holds a REPEATABLE READ transaction open in
// another session (application app) whose last statement carries a
// secret; it returns the console's URL and the holder's pid.
func horizonConsole(t *testing.T, warnAfter time.Duration, app string) (string, int) {
	t.Helper()
	dsn := pgtest.NewURL(t)
	db := pgtest.Open(t, dsn, dbconn.Options{})
	ctx := context.Background()
	// Dead row versions of the task rows, made after the snapshot below
	// was taken, so that vacuum cannot remove them.
	if _, err := db.ExecContext(ctx, `INSERT INTO baton.tasks (partition_key) SELECT 'p' || i FROM generate_series(1, 20) i`); err != nil {
		t.Fatal(err)
	}
	holder := pgtest.Open(t, dsn, dbconn.Options{ApplicationName: app, MaxOpenConns: 1})
	tx, err := holder.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	var pid int
	if err := tx.QueryRowContext(ctx, "SELECT pg_backend_pid() WHERE 'S3cret' <> ''").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `UPDATE baton.tasks SET available = available + 1`); err != nil {
		t.Fatal(err)
	}
	srv, err := console.New(pgtest.Handle(db), console.Config{Addr: "127.0.0.1:0", Refresh: 200 * time.Millisecond,
		Noun: "contract", ItemUnit: "records", HorizonWarnAfter: warnAfter,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Stop)
	h := httptest.NewServer(srv.Handler())
	t.Cleanup(h.Close)
	return h.URL, pid
}

// The overview's vacuum section names a held REPEATABLE READ transaction
// (pid, application, state, the query without its literal) and, past the
// threshold, highlights it as a warning; /api/overview carries the same.
func TestHorizonConsoleShowsAndWarns(t *testing.T) {
	t.Parallel()
	app := fmt.Sprintf("report-%d", time.Now().UnixNano()%1e9)
	u, pid := horizonConsole(t, time.Millisecond, app)
	testutil.Eventually(t, 20*time.Second, "the warning on the overview", func() error {
		_, body := get(t, u+"/")
		if !strings.Contains(body, `id="horizon-warning"`) || !strings.Contains(body, `class="card bad" id="horizon-age"`) {
			return fmt.Errorf("no warning:\n%s", body)
		}
		row := fmt.Sprintf(`<td class="num">%d</td><td>%s</td><td>idle in transaction</td>`, pid, app)
		if !strings.Contains(body, row) {
			return fmt.Errorf("no row %s:\n%s", row, body)
		}
		if !strings.Contains(body, `class="sev-bad over"`) || !strings.Contains(body, "<code>SELECT pg_backend_pid() WHERE &#39;…&#39; &lt;&gt; &#39;…&#39;</code>") {
			return fmt.Errorf("holder row not highlighted or query not shown:\n%s", body)
		}
		if strings.Contains(body, "S3cret") {
			t.Fatalf("the console shows the query's literal:\n%s", body)
		}
		if !strings.Contains(body, `<table class="narrow" id="dead-tables">`) || !strings.Contains(body, "<td>tasks</td>") {
			// The statistics reach pg_stat_user_tables within a second.
			return fmt.Errorf("no dead rows table:\n%s", body)
		}
		return nil
	})
	_, body := get(t, u+"/api/overview")
	var ov struct {
		Horizon struct {
			OldestAgeMS *int64 `json:"oldest_xact_age_ms"`
			Warning     bool   `json:"warning"`
			WarnAfterMS int64  `json:"warn_after_ms"`
			Holders     []struct {
				PID int `json:"pid"`
			} `json:"holders"`
			Tables []struct {
				Table string `json:"table"`
			} `json:"tables"`
		} `json:"horizon"`
	}
	if err := json.Unmarshal([]byte(body), &ov); err != nil {
		t.Fatal(err)
	}
	if !ov.Horizon.Warning || ov.Horizon.OldestAgeMS == nil || ov.Horizon.WarnAfterMS != 1 || len(ov.Horizon.Holders) == 0 || len(ov.Horizon.Tables) == 0 {
		t.Fatalf("/api/overview horizon: %s", body)
	}
}

// Below the threshold the holder is listed, not highlighted.
func TestHorizonConsoleBelowThreshold(t *testing.T) {
	t.Parallel()
	app := fmt.Sprintf("report-%d", time.Now().UnixNano()%1e9)
	u, pid := horizonConsole(t, time.Hour, app)
	_, body := get(t, u+"/")
	if !strings.Contains(body, fmt.Sprintf(`<td class="num">%d</td><td>%s</td>`, pid, app)) {
		t.Fatalf("holder not listed:\n%s", body)
	}
	if strings.Contains(body, `id="horizon-warning"`) && strings.Contains(body, app) && strings.Contains(body, "warning after 1h0m0s") {
		// Another test's transaction may be older than an hour only if
		// the machine is very slow; ours is not past it.
		for _, line := range strings.Split(body, "\n") {
			if strings.Contains(line, `id="horizon-warning"`) && strings.Contains(line, app) {
				t.Fatalf("warning below the threshold: %s", line)
			}
		}
	}
	if err := (console.Config{HorizonWarnAfter: -time.Second}).Validate(); err == nil || !strings.Contains(err.Error(), "horizon") {
		t.Fatalf("negative threshold: %v", err)
	}
}
