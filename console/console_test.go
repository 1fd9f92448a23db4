package console_test

import (
	"bufio"
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
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing/pricingschema"
	"github.com/batonhq/baton/schedule"
)

func TestMain(m *testing.M) { pgtest.Main(m, pricingschema.Set) }

const token = "s3cret-token"

// fixture: three contracts, one held by a worker, one quarantined, one done.
func newConsole(t *testing.T, tok string) (*httptest.Server, *taskstore.Store, func(string) int64) {
	t.Helper()
	db := pgtest.Open(t, pgtest.NewURL(t), dbconn.Options{})
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `INSERT INTO baton.tasks (partition_key, available, position) VALUES
		('c-held', 10, 2), ('c-poison', 5, 1), ('c-done', 3, 3)`); err != nil {
		t.Fatal(err)
	}
	s := taskstore.NewStore(db, "")
	if _, err := s.HeartbeatBelow(ctx, taskstore.Worker{InstanceID: "w1#aa", Name: "w1", Mode: "lock"}, time.Minute, time.Minute+time.Hour, nil); err != nil {
		t.Fatal(err)
	}
	if won, err := s.Claim(ctx, "w1#aa", time.Minute, []taskstore.Candidate{{Key: "c-held"}}); err != nil || len(won) != 1 {
		t.Fatalf("claim: %v %v", won, err)
	}
	won, err := s.Claim(ctx, "w1#aa", time.Minute, []taskstore.Candidate{{Key: "c-poison"}})
	if err != nil || len(won) != 1 {
		t.Fatalf("claim: %v %v", won, err)
	}
	if r, err := s.Fail(ctx, "w1#aa", won[0].Lease, "bad record 7", time.Millisecond, time.Millisecond, 1); err != nil || !r.Quarantined {
		t.Fatalf("fail: %+v %v", r, err)
	}
	srv, err := console.New(pgtest.Handle(db), console.Config{Addr: "127.0.0.1:0", Token: tok, Refresh: 200 * time.Millisecond,
		Noun: "contract", ItemUnit: "records", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Stop)
	h := httptest.NewServer(srv.Handler())
	t.Cleanup(h.Close)
	version := func(key string) int64 {
		v, _, err := s.Admin().Progress(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	return h, s, version
}

func get(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestPagesListContractsOwnersStatesAndHistory(t *testing.T) {
	t.Parallel()
	h, _, _ := newConsole(t, "")
	code, body := get(t, h.URL+"/contracts")
	if code != http.StatusOK {
		t.Fatalf("/contracts = %d\n%s", code, body)
	}
	for _, want := range []string{`data-contract="c-held"`, "w1#aa", `class="state active"`, `data-contract="c-poison"`,
		`class="state quarantined"`, "bad record 7", `class="state done"`, "3 contracts"} {
		if !strings.Contains(body, want) {
			t.Errorf("/contracts lacks %q", want)
		}
	}
	// Filtering by state and searching are plain GET forms.
	_, body = get(t, h.URL+"/contracts?state=quarantined")
	if !strings.Contains(body, `data-contract="c-poison"`) || strings.Contains(body, `data-contract="c-held"`) {
		t.Errorf("state filter: %s", body)
	}
	_, body = get(t, h.URL+"/contracts?q=DONE")
	if !strings.Contains(body, ">1 contract<") || !strings.Contains(body, `data-contract="c-done"`) {
		t.Errorf("search: %s", body)
	}
	_, body = get(t, h.URL+"/contracts?sort=lag&dir=desc")
	if i, j := strings.Index(body, `data-contract="c-held"`), strings.Index(body, `data-contract="c-poison"`); i < 0 || j < 0 || i > j {
		t.Errorf("sorted by lag descending, c-held (8 pending) should come before c-poison (4)")
	}
	code, body = get(t, h.URL+"/contracts/c-poison")
	if code != http.StatusOK || !strings.Contains(body, `class="ev quarantined`) || !strings.Contains(body, `class="ev claimed`) {
		t.Fatalf("contract page = %d, want its claim and quarantine in the history:\n%s", code, body)
	}
	if !strings.Contains(body, "Actions are off") || strings.Contains(body, "retry-form") {
		t.Errorf("read-only console offers the retry form")
	}
	if code, _ := get(t, h.URL+"/contracts/nope"); code != http.StatusNotFound {
		t.Errorf("unknown contract = %d, want 404", code)
	}
	code, body = get(t, h.URL+"/workers")
	if code != http.StatusOK || !strings.Contains(body, "w1#aa") || !strings.Contains(body, "poll") {
		t.Errorf("/workers = %d:\n%s", code, body)
	}
	code, body = get(t, h.URL+"/")
	if code != http.StatusOK || !strings.Contains(body, `id="workers-alive">1<`) {
		t.Errorf("/ = %d:\n%s", code, body)
	}
	// The refresh script asks for the live region alone.
	req, _ := http.NewRequest("GET", h.URL+"/contracts", nil)
	req.Header.Set("X-Fragment", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	frag, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(frag), "<html") || !strings.Contains(string(frag), `data-contract="c-held"`) {
		t.Errorf("fragment: %s", frag)
	}
}

func TestEventsStreamTheOverview(t *testing.T) {
	t.Parallel()
	h, _, _ := newConsole(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", h.URL+"/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	var events int
	for sc.Scan() && events < 2 {
		line := sc.Text()
		if strings.HasPrefix(line, "data: ") {
			if !strings.Contains(line, `"quarantined":1`) || !strings.Contains(line, `"backlog":12`) {
				t.Fatalf("overview event %s", line)
			}
			events++
		}
	}
	if events < 2 {
		t.Fatalf("got %d overview events, want a stream (%v)", events, sc.Err())
	}
}

func TestRetryNeedsTheToken(t *testing.T) {
	t.Parallel()
	post := func(h *httptest.Server, path string, form url.Values, hdr map[string]string) int {
		t.Helper()
		req, _ := http.NewRequest("POST", h.URL+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}

	// Read-only console: refused even with a token.
	ro, _, version := newConsole(t, "")
	before := version("c-poison")
	if code := post(ro, "/contracts/c-poison/retry", url.Values{"token": {token}}, nil); code != http.StatusForbidden {
		t.Fatalf("retry on a read-only console = %d, want 403", code)
	}
	if version("c-poison") != before {
		t.Fatal("a read-only console changed the contract")
	}

	h, s, version := newConsole(t, token)
	before = version("c-poison")
	for name, c := range map[string]struct {
		form url.Values
		hdr  map[string]string
	}{
		"no token":     {url.Values{}, nil},
		"wrong token":  {url.Values{"token": {"s3cret-tokeX"}}, nil},
		"cross-site":   {url.Values{"token": {token}}, map[string]string{"Sec-Fetch-Site": "cross-site"}},
		"other origin": {url.Values{"token": {token}}, map[string]string{"Origin": "https://evil.example"}},
	} {
		if code := post(h, "/contracts/c-poison/retry", c.form, c.hdr); code != http.StatusForbidden {
			t.Errorf("%s: retry = %d, want 403", name, code)
		}
	}
	if version("c-poison") != before {
		t.Fatal("a refused retry changed the contract")
	}
	if code := post(h, "/contracts/c-poison/retry", url.Values{"token": {token}}, nil); code != http.StatusSeeOther {
		t.Fatalf("retry with the token = %d, want 303", code)
	}
	if version("c-poison") != before+1 {
		t.Fatal("retry with the token did not re-enable the contract")
	}
	hist, err := s.Admin().History(context.Background(), "c-poison", 1)
	if err != nil || len(hist) != 1 || hist[0].Kind != partition.EventRetried || hist[0].Detail != "console" {
		t.Fatalf("latest event %+v %v; want retried by the console", hist, err)
	}
	// The bearer header works for scripts.
	if code := post(h, "/contracts/c-poison/retry", nil, map[string]string{"Authorization": "Bearer " + token}); code != http.StatusSeeOther {
		t.Fatalf("retry with a bearer token = %d, want 303", code)
	}
	if _, body := get(t, h.URL+"/contracts/c-poison"); strings.Contains(body, "retry-form") {
		t.Error("a retried contract still offers the retry form")
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []console.Config{{Addr: "nonsense"}, {Token: "short"}, {Refresh: time.Millisecond}} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: want an error", c)
		}
	}
	if err := (console.Config{}).Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

func TestJobsPageAndTrigger(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewURL(t), dbconn.Options{})
	ctx := context.Background()
	if err := schedule.NewStore(pgtest.Handle(db), "").Add(ctx, schedule.Definition{Name: "nightly-export", Cron: "0 2 * * *",
		Command: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	srv, err := console.New(pgtest.Handle(db), console.Config{Addr: "127.0.0.1:0", Token: token,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	h := httptest.NewServer(srv.Handler())
	t.Cleanup(h.Close)
	code, body := get(t, h.URL+"/jobs")
	if code != http.StatusOK || !strings.Contains(body, "nightly-export") || !strings.Contains(body, "0 2 * * *") {
		t.Fatalf("/jobs = %d:\n%s", code, body)
	}
	triggered := func() bool {
		var set bool
		if err := db.QueryRowContext(ctx, `SELECT trigger_at IS NOT NULL FROM baton.jobs WHERE name = 'nightly-export'`).Scan(&set); err != nil {
			t.Fatal(err)
		}
		return set
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.PostForm(h.URL+"/jobs/nightly-export/trigger", url.Values{"token": {"wrong-token"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || triggered() {
		t.Fatalf("trigger with a wrong token = %d (triggered %v), want 403 and nothing done", resp.StatusCode, triggered())
	}
	resp, err = c.PostForm(h.URL+"/jobs/nightly-export/trigger", url.Values{"token": {token}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || !triggered() {
		t.Fatalf("trigger with the token = %d (triggered %v), want 303 and a run asked for", resp.StatusCode, triggered())
	}
	// The page's form names the job in a field.
	if _, err := db.ExecContext(ctx, `UPDATE baton.jobs SET trigger_at = NULL`); err != nil {
		t.Fatal(err)
	}
	resp, err = c.PostForm(h.URL+"/jobs/trigger", url.Values{"token": {token}, "name": {"nightly-export"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || !triggered() {
		t.Fatalf("trigger from the page's form = %d (triggered %v), want 303 and a run asked for", resp.StatusCode, triggered())
	}
	if _, body := get(t, h.URL+"/jobs"); !strings.Contains(body, `id="trigger-form"`) {
		t.Error("the jobs page of a console with a token has no trigger form")
	}
	resp, err = c.PostForm(h.URL+"/jobs/nope/trigger", url.Values{"token": {token}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("trigger of an unknown job = %d, want 404", resp.StatusCode)
	}
}
