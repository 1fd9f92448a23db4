package browser

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing/pricer"
	"github.com/batonhq/baton/schedule"
)

// newBrowser starts headless Chromium for the test and returns its
// context; every step should take its own timeout from it.
func newBrowser(t *testing.T, chrome string) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chrome), chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 1000),
		chromedp.Flag("disable-dev-shm-usage", true),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	// The browser lives as long as the first call's context: no timeout.
	if err := chromedp.Do(bctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("starting %s: %v", chrome, err)
	}
	return bctx
}

// overflowJS lists what a page cuts off or pushes past the viewport:
// the document wider than the window, an element reaching beyond it, an
// element clipping its own content, and a table container that needs
// scrolling although it may not (strict) or cannot scroll. An element
// inside a table container that scrolls sideways is reachable, so only
// the container is judged.
const overflowJS = `((strict) => {
	const vw = document.documentElement.clientWidth;
	const out = [];
	const name = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
		(typeof el.className === 'string' && el.className.trim() ? '.' + el.className.trim().split(/\s+/).join('.') : '');
	if (document.documentElement.scrollWidth > vw) {
		out.push('the page is ' + document.documentElement.scrollWidth + ' px wide in a ' + vw + ' px window');
	}
	for (const el of document.body.querySelectorAll('*')) {
		const r = el.getBoundingClientRect();
		if (r.width === 0 && r.height === 0) continue;
		const wrap = el.parentElement && el.parentElement.closest('.table-wrap');
		if (wrap) continue;
		if (r.left < -0.5 || r.right > vw + 0.5) {
			out.push(name(el) + ' spans ' + Math.round(r.left) + '..' + Math.round(r.right) + ' px');
		}
		const cs = getComputedStyle(el);
		if (el.classList.contains('table-wrap')) {
			if (el.scrollWidth > el.clientWidth + 1) {
				if (strict) out.push(name(el) + ' needs scrolling: ' + el.scrollWidth + ' px of content in ' + el.clientWidth);
				else if (cs.overflowX !== 'auto' && cs.overflowX !== 'scroll') out.push(name(el) + ' cuts its table off');
			}
		} else if (cs.overflowX !== 'visible' && el.scrollWidth > el.clientWidth + 1 && el.tagName !== 'PROGRESS') {
			out.push(name(el) + ' clips its content');
		}
	}
	return out;
})`

// The console's pages fit the window: at 1,280 px every table shows all
// its columns (long error text wraps), and at 800 px nothing reaches past
// the window (a wide table scrolls inside its own container). A normal
// release is not coloured as an error, a fence rejection is. The
// screenshots are left in the screenshot directory. Not parallel: a
// second browser next to TestConsoleInABrowser's would slow its workers'
// heartbeats on a small machine.
func TestConsoleLayoutFits(t *testing.T) {
	chrome := findChromium(t)
	shots := screenshotDir(t)
	c := cli{t, pgtest.NewURL(t)}
	db := pgtest.Open(t, c.dsn, dbconn.Options{})
	ctx := context.Background()

	// A contract with a long history by workers with long names, long
	// errors and an unbroken token (a path) in one of them.
	const key = "CTR-2026-000417"
	const w1, w2 = "pricing-worker-eu-west-1a-7f9c#3f9a1c2e8b7d", "pricing-worker-eu-west-1b-22d1#91b0c4aa17e2"
	longErr := "record r-1742 of batch 88: the pricer rejected the amount (tier table missing for currency CHF on " +
		"2026-11-25); see /var/lib/pricing/tiers/2026/11/25/currency=CHF/tier-overrides-effective-from-2026-11-01T00:00:00Z.json"
	if _, err := db.ExecContext(ctx, `INSERT INTO baton.tasks (kind, partition_key, available, position, attempts, last_error)
		VALUES ('pricing', ?, 250000, 117500, 2, ?), ('pricing', 'CTR-2026-000418', 1000, 1000, 0, NULL)`, key, longErr); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO baton.events
		(partition_key, kind, version, worker, prev_owner, prev_heartbeat_at, position, items, attempts, takeover_ms, detail) VALUES
		(?0, 'claimed', 1, ?1, NULL, NULL, 0, NULL, NULL, NULL, NULL),
		(?0, 'first_batch', 1, ?1, NULL, NULL, 65536, 65536, NULL, NULL, NULL),
		(?0, 'lost', 1, ?1, NULL, NULL, 98304, NULL, NULL, NULL, 'lease expired locally: heartbeat statement timed out after 2.5 s'),
		(?0, 'takeover', 2, ?2, ?1, now() - interval '3 s', 98304, NULL, NULL, NULL, NULL),
		(?0, 'fenced', 1, ?1, NULL, NULL, 98304, NULL, NULL, NULL, 'commit rejected by the fence: the claim is no longer current (version 1, now 2)'),
		(?0, 'first_batch', 2, ?2, NULL, now() - interval '3 s', 117500, 19196, NULL, 1612, NULL),
		(?0, 'failed', 2, ?2, NULL, NULL, 117500, NULL, 1, NULL, ?3),
		(?0, 'failed', 2, ?2, NULL, NULL, 117500, NULL, 2, NULL, ?3),
		(?0, 'retried', 3, NULL, NULL, NULL, 117500, NULL, NULL, NULL, 'console'),
		(?0, 'released', 3, ?2, NULL, NULL, 117500, NULL, NULL, NULL, 'caught_up')`,
		key, w1, w2, longErr); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `UPDATE baton.events SET task_kind = 'pricing' WHERE partition_key = ?`, key); err != nil {
		t.Fatal(err)
	}
	// Workers: w2 live and holding a third contract, w1 expired (it was
	// killed), a third stopped.
	store := taskstore.NewStore(db, "").Kind(pricer.Kind)
	const w3 = "pricing-worker-eu-west-1c-0be4#5d2c6e0f1a93"
	for _, id := range []string{w1, w2, w3} {
		if _, err := store.HeartbeatBelow(ctx, taskstore.Worker{InstanceID: id, Name: partition.InstanceName(id),
			Hostname: "ip-10-20-" + id[len(id)-4:] + ".eu-west-1.compute.internal", PID: 4242, Mode: "lock"}, time.Minute, time.Minute+time.Hour, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ExecContext(ctx, `UPDATE baton.workers SET expires_at = now() - interval '20 s',
		heartbeat_at = now() - interval '80 s' WHERE instance_id = ?`, w1); err != nil {
		t.Fatal(err)
	}
	if err := store.StopWorker(ctx, w3); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO baton.tasks (kind, partition_key, available, position) VALUES ('pricing', 'CTR-2026-000419', 5000, 1200)`); err != nil {
		t.Fatal(err)
	}
	if won, err := store.Claim(ctx, w2, time.Minute, []taskstore.Candidate{{Key: "CTR-2026-000419"}}); err != nil || len(won) != 1 {
		t.Fatalf("claim: %v %v", won, err)
	}
	// A job whose last run failed with a long error.
	if err := schedule.NewStore(pgtest.Handle(db), "").Add(ctx, schedule.Definition{Name: "nightly-export-of-priced-records-to-the-ledger",
		Cron: "15 2 * * 1-5", Command: []string{"export"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `UPDATE baton.jobs SET last_result = 'failed', runs = 12,
		last_run_started = now() - interval '70 s', last_run_finished = now() - interval '10 s', last_error = ?`,
		"exit status 3: export failed: could not write s3://ledger-exports-production-eu-west-1/priced/2026/11/25/"+
			"part-00017-of-00032.parquet.tmp-upload-8c1f2b6e4d: AccessDenied: the role baton-export-writer may not write "+
			"to this prefix (request id 7D2E9A41C3F05B86, host id Zk3qfE0rYb9vT8xw2L1mN6sJ4pQ7uH5c)"); err != nil {
		t.Fatal(err)
	}

	base := consoleURL(t, c)
	bctx := newBrowser(t, chrome)
	pages := []struct{ name, path, ready string }{
		{"contract", "/contracts/" + key, "#history tr.ev-takeover"},
		{"jobs", "/jobs", "#jobs"},
		{"contracts", "/contracts", "#contracts tr[data-contract]"},
		{"workers", "/workers", "#workers tr[data-instance]"},
		{"overview", "/", "#takeovers"},
	}
	for _, width := range []int64{1280, 800} {
		for _, p := range pages {
			sctx, cancel := context.WithTimeout(bctx, 90*time.Second)
			var problems []string
			err := chromedp.Do(sctx, chromedp.EmulateViewport(width, 900), chromedp.Navigate(base+p.path),
				chromedp.WaitVisible(chromedp.CSS(p.ready)),
				chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
					v, err := chromedp.Evaluate[[]string](fmt.Sprintf("%s(%v)", overflowJS, width >= 1280))(ctx, tg)
					problems = v
					return err
				}))
			if err != nil {
				cancel()
				t.Fatalf("%s at %d px: %v", p.name, width, err)
			}
			png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
			cancel()
			if err != nil {
				t.Fatalf("screenshot of %s at %d px: %v", p.name, width, err)
			}
			if err := os.WriteFile(filepath.Join(shots, fmt.Sprintf("layout-%s-%d.png", p.name, width)), png, 0o644); err != nil {
				t.Fatal(err)
			}
			if len(problems) > 0 {
				t.Errorf("%s at %d px:\n\t%s", p.name, width, strings.Join(problems, "\n\t"))
			}
		}
	}

	// Colours by severity: a caught-up release is not red, a fence
	// rejection and a failure are.
	sctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx, chromedp.Navigate(base+"/contracts/"+key),
		chromedp.WaitVisible(chromedp.CSS("#history tr.ev-takeover"))); err != nil {
		t.Fatal(err)
	}
	colours, err := chromedp.Run(sctx, chromedp.Evaluate[map[string]string](`(() => {
		const out = {};
		const red = c => c.replace(/\s/g, '') === 'rgb(197,48,48)';
		for (const tr of document.querySelectorAll('#history tbody tr')) {
			const kind = tr.querySelector('.ev').textContent.trim();
			const detail = tr.lastElementChild.textContent;
			const k = kind === 'released' ? detail : kind;
			const badge = getComputedStyle(tr.querySelector('.ev'));
			const cell = getComputedStyle(tr.lastElementChild);
			out[k] = (red(badge.color) || red(badge.backgroundColor) || (detail.trim() !== '' && red(cell.color))) ? 'red' : 'not red';
		}
		return out;
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"caught_up": "not red", "first_batch": "not red", "claimed": "not red",
		"takeover": "not red", "fenced": "red", "failed": "red"} {
		if colours[k] != want {
			t.Errorf("%s is %s in the history, want %s (%v)", k, colours[k], want, colours)
		}
	}
	t.Logf("screenshots in %s", shots)
}
