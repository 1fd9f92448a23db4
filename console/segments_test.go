package console_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/console"
	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/partition"
)

// A contract split into segments is one contract in the console: listed
// once (its segments never), with their records in its lag and progress,
// the most pressing state among them, how many are held, and a page of
// its own only; retrying it re-enables its quarantined segment.
func TestSplitContractIsOneContract(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewURL(t), dbconn.Options{})
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO baton.tasks (partition_key, available, position) VALUES ('c-split', 3000, 3000), ('c-plain', 10, 4)`,
		`INSERT INTO baton.tasks (partition_key, segment_of, generation, position, available)
		 VALUES ('` + partition.SegmentKey("c-split", 0) + `', 'c-split', 1, 1000, 1000)`,
		`INSERT INTO baton.tasks (partition_key, segment_of, generation, position, available, owner, heartbeat_at, lease_expires_at)
		 VALUES ('` + partition.SegmentKey("c-split", 1000) + `', 'c-split', 1, 1200, 2000, 'w1#aa', now(), now() + interval '1 hour')`,
		`INSERT INTO baton.tasks (partition_key, segment_of, generation, position, available, failed_at, attempts, last_error, lease_expires_at)
		 VALUES ('` + partition.SegmentKey("c-split", 2000) + `', 'c-split', 1, 2000, 3000, now(), 5, 'bad record 2345', 'infinity')`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := console.New(pgtest.Handle(db), console.Config{Addr: "127.0.0.1:0", Token: token, Refresh: 200 * time.Millisecond,
		Noun: "contract", ItemUnit: "records", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Stop)
	h := httptest.NewServer(srv.Handler())
	t.Cleanup(h.Close)

	code, body := get(t, h.URL+"/contracts")
	if code != http.StatusOK {
		t.Fatalf("/contracts = %d\n%s", code, body)
	}
	for _, want := range []string{`data-contract="c-split"`, `data-contract="c-plain"`, "2 contracts", `class="state quarantined"`,
		"1/2 segments held", "items 2001–3000: bad record 2345", `title="1200 of 3000"`} {
		if !strings.Contains(body, want) {
			t.Errorf("/contracts lacks %q", want)
		}
	}
	if strings.Contains(body, "c-split#") {
		t.Errorf("/contracts lists a segment:\n%s", body)
	}
	code, body = get(t, h.URL+"/contracts/c-split")
	if code != http.StatusOK || !strings.Contains(body, `id="segments">2 not caught up, 1 held by workers; processed without a gap up to 1,200`) ||
		!strings.Contains(body, "1,800 records") || !strings.Contains(body, "retry-form") {
		t.Fatalf("contract page = %d:\n%s", code, body)
	}
	if code, _ := get(t, h.URL+"/contracts/"+url.PathEscape(partition.SegmentKey("c-split", 2000))); code != http.StatusNotFound {
		t.Errorf("a segment's page = %d, want 404: it is no contract", code)
	}

	form := url.Values{"token": {token}}
	req, _ := http.NewRequest("POST", h.URL+"/contracts/c-split/retry", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || !strings.Contains(resp.Header.Get("Location"), url.QueryEscape("retried")) {
		t.Fatalf("retry = %d, to %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	var failed int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM baton.tasks WHERE failed_at IS NOT NULL`).Scan(&failed); err != nil || failed != 0 {
		t.Fatalf("%d rows still quarantined after retrying the contract (%v)", failed, err)
	}
	if _, body := get(t, h.URL+"/contracts/c-split"); !strings.Contains(body, `class="state active"`) {
		t.Errorf("after retry the contract is not active (a segment is held):\n%s", body)
	}
}
