package browser

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/pricing/pricer"
)

// findChromium returns the headless browser to drive, skipping the test
// when none is installed unless BATON_REQUIRE_BROWSER=1 (CI sets it).
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("BATON_REQUIRE_BROWSER") == "1" {
		t.Fatal("no chromium found (apt-get install chromium)")
	}
	t.Skip("no chromium found (apt-get install chromium); BATON_REQUIRE_BROWSER=1 makes this a failure")
	return ""
}

// screenshotDir is where the browser test leaves its screenshots:
// $BATON_SCREENSHOT_DIR, or baton-console-screenshots in the temporary
// directory.
func screenshotDir(t *testing.T) string {
	dir := os.Getenv("BATON_SCREENSHOT_DIR")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "baton-console-screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// consoleURL starts "worker ui" and returns its address from its log.
func consoleURL(t *testing.T, c cli, env ...string) string {
	t.Helper()
	cmd := c.command("ui", "--addr", "127.0.0.1:0", "--log-format", "json")
	cmd.Env = append(cmd.Env, env...)
	return consoleURLOf(t, cmd)
}

// The console in a real browser over a running system: the contract table
// fills with owners and states, a SIGKILLed worker's contract shows the
// takeover and its latency in its history, and a quarantined contract is
// retried with the token and not without it.
func TestConsoleInABrowser(t *testing.T) {
	t.Parallel()
	chrome := findChromium(t)
	shots := screenshotDir(t)
	const token = "browser-test-token"
	c := cli{t, pgtest.NewURL(t)}
	c.mustRun("seed", "--contracts", "8", "--records-per-contract", "20000", "--dir", t.TempDir(), "--load")
	db := pgtest.Open(t, c.dsn, dbconn.Options{})
	ctx := context.Background()

	// One contract quarantined through the protocol: a claim, then a
	// failure at the last attempt.
	var poison string
	if err := db.QueryRow(`SELECT max(partition_key) FROM baton.tasks`).Scan(&poison); err != nil {
		t.Fatal(err)
	}
	store := taskstore.NewStore(db, "").Kind(pricer.Kind)
	won, err := store.Claim(ctx, "probe#0001", time.Minute, []taskstore.Candidate{{Key: poison}})
	if err != nil || len(won) != 1 {
		t.Fatalf("claiming %s: %v %v", poison, won, err)
	}
	if r, err := store.Fail(ctx, "probe#0001", won[0].Lease, "record r-17: amount rejected by the pricer",
		time.Millisecond, time.Millisecond, 1); err != nil || !r.Quarantined {
		t.Fatalf("quarantining %s: %+v %v", poison, r, err)
	}
	quarantined := func() bool {
		var q bool
		if err := db.QueryRow(`SELECT failed_at IS NOT NULL FROM baton.tasks WHERE partition_key = ?`, poison).Scan(&q); err != nil {
			t.Fatal(err)
		}
		return q
	}

	base := consoleURL(t, c, "BATON_UI_TOKEN="+token)
	worker := func(name string, maxParts string) *exec.Cmd {
		cmd := c.command("run", "--id", name, "--heartbeat", "200ms", "--stale-after", "1s", "--confirm", "2",
			"--batch-size", "50", "--max-partitions", maxParts, "--log-format", "json")
		cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	alpha := worker("alpha", "2")

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chrome), chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 1000),
		// Containers often give /dev/shm a few megabytes, too few for a tab.
		chromedp.Flag("disable-dev-shm-usage", true),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	// The first call starts the browser, which lives as long as that
	// call's context: no timeout on it. Every later step gets its own.
	if err := chromedp.Do(bctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("starting %s: %v", chrome, err)
	}
	step := func() (context.Context, context.CancelFunc) { return context.WithTimeout(bctx, 90*time.Second) }
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := step()
		defer cancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(what, sel string) string {
		t.Helper()
		sctx, cancel := step()
		defer cancel()
		v, err := chromedp.Run(sctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
	shoot := func(name string) {
		t.Helper()
		sctx, cancel := step()
		defer cancel()
		png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(shots, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	wait := func(what, js string) {
		t.Helper()
		sctx, cancel := step()
		defer cancel()
		pollPage(t, sctx, what, js)
	}

	// The contract table fills: every contract, alpha owning some, the
	// poisoned one quarantined. The page refreshes itself (server-sent
	// events), so the test only watches it.
	run("open the contracts", chromedp.Navigate(base+"/contracts"))
	wait("the table fills with alpha's contracts", `(() => {
		const rows = document.querySelectorAll('#contracts tr[data-contract]');
		const text = document.querySelector('#contracts').textContent;
		return rows.length === 8 && text.includes('alpha#') && text.includes('quarantined') && text.includes('active');
	})()`)
	shoot("contracts.png")

	// SIGKILL alpha while it holds a partly priced contract; beta takes it.
	var victim, alphaID string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) { // polling the database for a moment to act on
		err := db.QueryRow(`SELECT partition_key, owner FROM baton.tasks
			WHERE owner LIKE 'alpha#%' AND position > 0 AND position < available
			ORDER BY partition_key LIMIT 1`).Scan(&victim, &alphaID)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alpha held no partly priced contract in time: %v", err)
		}
	}
	if err := alpha.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = alpha.Wait()
	worker("beta", "8")
	run("open the killed worker's contract", chromedp.Navigate(base+"/contracts/"+victim))
	// On a starved machine alpha may have lost and retaken the contract
	// itself before the kill (a takeover from itself): wait for beta's.
	wait("beta's takeover and its latency in the history", `(() => {
		const fb = document.querySelector('#history tr.ev-first_batch');
		const td = document.querySelector('#history tr.ev-first_batch td.takeover-time');
		const tk = document.querySelector('#history tr.ev-takeover');
		return !!td && td.textContent.trim() !== '' && fb.textContent.includes('beta#') &&
			!!tk && tk.textContent.includes('beta#');
	})()`)
	takeover, firstBatch := text("the takeover row", `#history tr.ev-takeover`), text("the first batch row", `#history tr.ev-first_batch`)
	if !strings.Contains(takeover, alphaID) || !strings.Contains(takeover, "beta#") {
		t.Fatalf("takeover row %q: want beta taking over from %s", takeover, alphaID)
	}
	if !strings.Contains(firstBatch, "beta#") || !(strings.Contains(firstBatch, " s") || strings.Contains(firstBatch, " ms")) {
		t.Fatalf("first batch row %q: want beta's batch with a takeover time", firstBatch)
	}
	if summary := text("the takeover summary", `#takeovers`); !strings.Contains(summary, "took over from "+alphaID) ||
		!strings.Contains(summary, "after the old owner's last heartbeat") {
		t.Fatalf("takeover summary %q: want beta taking over from %s with its latency", summary, alphaID)
	}
	shoot("takeover.png")
	run("open the overview", chromedp.Navigate(base+"/"))
	wait("the overview counts the takeover", `Number(document.querySelector('#takeovers').textContent) >= 1`)
	shoot("overview.png")

	// Retry the quarantined contract: refused without the token and with a
	// wrong one, done with the right one.
	page := base + "/contracts/" + poison
	run("retry without a token", chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS(`#retry-form`)),
		chromedp.RemoveAttribute(chromedp.CSS(`#retry-form input[name=token]`), "required"),
		chromedp.Click(chromedp.CSS(`#retry`)), chromedp.WaitVisible(chromedp.CSS(`#error`)))
	msg := text("the refusal", `#error`)
	if !strings.Contains(msg, "token") || !quarantined() {
		t.Fatalf("retry without a token: %q, quarantined %v; want a refusal", msg, quarantined())
	}
	run("retry with a wrong token", chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS(`#retry-form`)),
		chromedp.SendKeys(chromedp.CSS(`#retry-form input[name=token]`), "not-the-token"),
		chromedp.Click(chromedp.CSS(`#retry`)), chromedp.WaitVisible(chromedp.CSS(`#error`)))
	msg = text("the refusal", `#error`)
	if !strings.Contains(msg, "token") || !quarantined() {
		t.Fatalf("retry with a wrong token: %q, quarantined %v; want a refusal", msg, quarantined())
	}
	run("retry with the token", chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS(`#retry-form`)),
		chromedp.SendKeys(chromedp.CSS(`#retry-form input[name=token]`), token),
		chromedp.Click(chromedp.CSS(`#retry`)), chromedp.WaitVisible(chromedp.CSS(`.flash`)))
	msg = text("the confirmation", `.flash`)
	if !strings.Contains(msg, "retried") || quarantined() {
		t.Fatalf("retry with the token: %q, quarantined %v; want it retried", msg, quarantined())
	}
	wait("the retry in the history", `!!document.querySelector('#history tr.ev-retried')`)
	shoot("retried.png")
	t.Logf("screenshots in %s", shots)
}

// pollPage waits until the JavaScript predicate js holds on the page of
// ctx's browser tab. An element the page has not rendered yet (the
// document just replaced by a navigation, a table filled by script) is
// "not yet", not a failure: the predicate's TypeError on a missing node
// makes that round of the poll false. A poll begun while the document was
// being replaced loses its execution context: it polls again in the new
// one.
func pollPage(t *testing.T, ctx context.Context, what, js string) {
	t.Helper()
	js = `(() => { try { return !!(` + js + `); } catch (e) { if (e instanceof TypeError) { return false; } throw e; } })()`
	for attempt := 1; ; attempt++ {
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(80*time.Second)))
		if err != nil && strings.Contains(err.Error(), "Cannot find context with specified id") && attempt < 5 {
			continue
		}
		if err != nil {
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			page, _ := chromedp.Run(pctx, chromedp.Evaluate[string](`location.href + "\n" + (document.body ? document.body.innerText.slice(0, 3000) : "")`))
			cancel()
			t.Fatalf("waiting for %s: %v\nthe page then:\n%s", what, err, page)
		}
		return
	}
}
