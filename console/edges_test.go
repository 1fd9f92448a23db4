package console_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/console"
	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
)

// serve starts a console over db with cfg (quiet, loopback) and returns
// its base URL.
func serve(t *testing.T, db *bun.DB, cfg console.Config) string {
	t.Helper()
	cfg.Addr = "127.0.0.1:0"
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := console.New(pgtest.Handle(db), cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := httptest.NewServer(srv.Handler())
	t.Cleanup(h.Close)
	return h.URL
}

func exec(t *testing.T, db *bun.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.ExecContext(context.Background(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// row returns the table row (<tr …>…</tr>) of body that contains marker.
func row(t *testing.T, body, marker string) string {
	t.Helper()
	i := strings.Index(body, marker)
	if i < 0 {
		t.Fatalf("no %q in the page", marker)
	}
	start := strings.LastIndex(body[:i], "<tr")
	end := strings.Index(body[i:], "</tr>")
	if start < 0 || end < 0 {
		t.Fatalf("%q is not in a table row", marker)
	}
	return body[start : i+end]
}

// The overview's recent notable events are chosen by kind in the query:
// seven takeovers (each confirmed by a first batch) and an unusual release
// stay listed under hundreds of newer routine events (first batches,
// caught-up releases), and the routine ones are not listed.
func TestNotableEventsSurviveNewerRoutineOnes(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewURL(t), dbconn.Options{})
	exec(t, db, `INSERT INTO baton.events (partition_key, kind, version, worker, detail)
		VALUES ('odd-release', 'released', 3, 'a#1', 'handed over by an operator')`)
	for i := range 7 {
		k := "taken-" + string(rune('a'+i))
		exec(t, db, `INSERT INTO baton.events (partition_key, kind, version, worker, prev_owner, prev_heartbeat_at)
			VALUES (?, 'takeover', 2, 'b#2', 'a#1', now() - interval '2 s')`, k)
		exec(t, db, `INSERT INTO baton.events (partition_key, kind, version, worker, position, items, prev_heartbeat_at, takeover_ms)
			VALUES (?, 'first_batch', 2, 'b#2', 10, 10, now() - interval '2 s', 1500)`, k)
	}
	exec(t, db, `INSERT INTO baton.events (partition_key, kind, version, worker, position, items)
		SELECT 'routine-' || i, 'first_batch', 1, 'b#2', 10, 10 FROM generate_series(1, 300) i`)
	exec(t, db, `INSERT INTO baton.events (partition_key, kind, version, worker, position, detail)
		SELECT 'routine-' || i, 'released', 1, 'b#2', 10, 'caught_up' FROM generate_series(1, 300) i`)

	code, body := get(t, serve(t, db, console.Config{})+"/")
	if code != http.StatusOK {
		t.Fatalf("/ = %d\n%s", code, body)
	}
	if !strings.Contains(body, `id="takeovers">7<`) {
		t.Errorf("the takeovers card does not say 7")
	}
	if n := strings.Count(body, `class="ev takeover`); n != 7 {
		t.Errorf("%d takeovers listed, want the 7 of the last hour", n)
	}
	for i := range 7 {
		if k := "taken-" + string(rune('a'+i)); !strings.Contains(body, ">"+k+"<") {
			t.Errorf("takeover of %s not listed", k)
		}
	}
	if n := strings.Count(body, `class="ev released`); n != 1 || !strings.Contains(body, "handed over by an operator") {
		t.Errorf("%d releases listed, want only the unusual one", n)
	}
	if strings.Contains(body, "routine-") {
		t.Errorf("routine first batches or caught-up releases listed as notable")
	}
	// A takeover's row carries its first batch's takeover time.
	if r := row(t, body, ">taken-c<"); !strings.Contains(r, "1.5 s") {
		t.Errorf("takeover row %s: want the takeover time of its first batch", r)
	}
}

// Events are styled by severity: a normal release is not an error; fence
// rejections, failures and quarantines are; takeovers are warnings.
func TestEventsStyledBySeverity(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewURL(t), dbconn.Options{})
	exec(t, db, `INSERT INTO baton.tasks (partition_key, available, position) VALUES ('k', 10, 5)`)
	exec(t, db, `INSERT INTO baton.events (partition_key, kind, version, worker, prev_owner, detail, attempts) VALUES
		('k', 'claimed', 1, 'a#1', NULL, NULL, NULL),
		('k', 'released', 1, 'a#1', NULL, 'caught_up', NULL),
		('k', 'takeover', 2, 'b#2', 'a#1', NULL, NULL),
		('k', 'fenced', 1, 'a#1', NULL, 'fence: claim no longer current', NULL),
		('k', 'failed', 2, 'b#2', NULL, 'pricer exploded', 1),
		('k', 'quarantined', 2, 'b#2', NULL, 'pricer exploded again', 2),
		('k', 'released', 3, 'c#3', NULL, 'dropped by an operator', NULL)`)
	base := serve(t, db, console.Config{})
	var page string
	for _, p := range []string{"/partitions/k", "/contracts/k"} { // before and after the nouns were configurable
		if code, body := get(t, base+p); code == http.StatusOK {
			page = body
			break
		}
	}
	if page == "" {
		t.Fatal("no page for partition k")
	}
	for marker, want := range map[string]string{
		">caught_up<":              "sev-ok",
		">fence: claim no":         "sev-bad",
		">pricer exploded<":        "sev-bad",
		">pricer exploded again<":  "sev-bad",
		">dropped by an operator<": "sev-warn",
		`class="ev takeover`:       "sev-warn",
	} {
		r := row(t, page, marker)
		if !strings.Contains(r, want) {
			t.Errorf("history row %s: want %s", r, want)
		}
		if want != "sev-bad" && strings.Contains(r, `class="err"`) {
			t.Errorf("history row %s: styled as an error", r)
		}
	}
}

// The workers page shows every registered instance and whether it is
// live, expired (its heartbeat ran out) or stopped (it said goodbye).
func TestWorkersPageShowsLiveness(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewURL(t), dbconn.Options{})
	ctx := context.Background()
	s := taskstore.NewStore(db, "")
	for _, id := range []string{"live#1", "expired#2", "stopped#3"} {
		if _, err := s.HeartbeatBelow(ctx, taskstore.Worker{InstanceID: id, Name: partition.InstanceName(id), Mode: "lock"}, time.Minute, time.Minute+time.Hour, nil); err != nil {
			t.Fatal(err)
		}
	}
	exec(t, db, `UPDATE baton.workers SET expires_at = now() - interval '5 s', heartbeat_at = now() - interval '65 s' WHERE instance_id = 'expired#2'`)
	if err := s.StopWorker(ctx, "stopped#3"); err != nil {
		t.Fatal(err)
	}
	// An owner registered by hand (or by an older release) with an
	// infinite expiry is listed as expired, not an error of the page.
	exec(t, db, `INSERT INTO baton.workers (instance_id, name, expires_at) VALUES ('ghost#4', 'ghost', '-infinity')`)
	base := serve(t, db, console.Config{})
	code, body := get(t, base+"/workers")
	if code != http.StatusOK {
		t.Fatalf("/workers = %d", code)
	}
	for id, want := range map[string]string{"live#1": "live", "expired#2": "expired", "stopped#3": "stopped", "ghost#4": "expired"} {
		if !strings.Contains(body, `data-instance="`+id+`"`) {
			t.Errorf("%s not listed", id)
			continue
		}
		if r := row(t, body, `data-instance="`+id+`"`); !strings.Contains(r, `class="liveness `+want+`"`) {
			t.Errorf("%s: row %s, want it marked %s", id, r, want)
		}
	}
	if _, body := get(t, base+"/"); !strings.Contains(body, `id="workers-alive">1<`) {
		t.Errorf("overview: want 1 worker alive")
	}
}

var ownerBeat = regexp.MustCompile(`class="owner-heartbeat[^"]*"[^>]*>([^<]*)<`)

// A contract's heartbeat is its owner's own (the workers row, written at
// every beat), not the lease's last write on the task row, which
// heartbeats rewrite only every few beats.
func TestOwnerHeartbeatIsTheWorkersOwn(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewURL(t), dbconn.Options{})
	ctx := context.Background()
	exec(t, db, `INSERT INTO baton.tasks (partition_key, available, position) VALUES ('k', 10, 2)`)
	s := taskstore.NewStore(db, "")
	if _, err := s.HeartbeatBelow(ctx, taskstore.Worker{InstanceID: "w#1", Name: "w", Mode: "lock"}, time.Minute, time.Minute+time.Hour, nil); err != nil {
		t.Fatal(err)
	}
	if won, err := s.Claim(ctx, "w#1", time.Minute, []taskstore.Candidate{{Key: "k"}}); err != nil || len(won) != 1 {
		t.Fatalf("claim: %v %v", won, err)
	}
	exec(t, db, `UPDATE baton.tasks SET heartbeat_at = now() - interval '40 s'`)
	exec(t, db, `UPDATE baton.workers SET heartbeat_at = now() - interval '3 s'`)
	base := serve(t, db, console.Config{})
	var page string
	for _, p := range []string{"/partitions/k", "/contracts/k"} {
		if code, body := get(t, base+p); code == http.StatusOK {
			page = body
			break
		}
	}
	m := ownerBeat.FindStringSubmatch(page)
	if m == nil || !strings.HasPrefix(m[1], "3.") || !strings.HasSuffix(m[1], " s") {
		t.Fatalf("owner's heartbeat %q, want about 3 s (the worker's), not the lease's 40 s", m)
	}
	for _, p := range []string{"/partitions", "/contracts"} {
		if code, body := get(t, base+p); code == http.StatusOK {
			m := ownerBeat.FindStringSubmatch(row(t, body, `>k</a>`))
			if m == nil || !strings.HasPrefix(m[1], "3.") {
				t.Errorf("list's owner heartbeat %q, want about 3 s", m)
			}
			return
		}
	}
	t.Fatal("no list of partitions")
}

// Nothing in a console left at its defaults speaks of pricing: its nouns
// are generic and so are its routes.
func TestDefaultNounsAreGeneric(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewURL(t), dbconn.Options{})
	ctx := context.Background()
	exec(t, db, `INSERT INTO baton.tasks (partition_key, available, position) VALUES ('p-1', 10, 2), ('p-2', 4, 4)`)
	s := taskstore.NewStore(db, "")
	if _, err := s.HeartbeatBelow(ctx, taskstore.Worker{InstanceID: "w#1", Name: "w", Mode: "lock"}, time.Minute, time.Minute+time.Hour, nil); err != nil {
		t.Fatal(err)
	}
	if won, err := s.Claim(ctx, "w#1", time.Minute, []taskstore.Candidate{{Key: "p-1"}}); err != nil || len(won) != 1 {
		t.Fatalf("claim: %v %v", won, err)
	}
	base := serve(t, db, console.Config{})
	for _, p := range []string{"/", "/partitions", "/partitions/p-1", "/partitions/p-2", "/workers", "/jobs"} {
		code, body := get(t, base+p)
		if code != http.StatusOK {
			t.Errorf("%s = %d", p, code)
			continue
		}
		low := strings.ToLower(body)
		for _, word := range []string{"contract", "record", "pric"} {
			if strings.Contains(low, word) {
				t.Errorf("%s speaks of %q", p, word)
			}
		}
	}
	if code, _ := get(t, base+"/contracts"); code != http.StatusNotFound {
		t.Errorf("/contracts = %d on a console for partitions, want 404", code)
	}
}
