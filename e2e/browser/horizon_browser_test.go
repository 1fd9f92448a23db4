package browser

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
)

// The console's overview in a real browser: a REPEATABLE READ transaction
// held in another session shows in red under a warning banner naming it;
// once it ends, the live page drops it without a reload.
func TestHorizonConsoleInABrowser(t *testing.T) {
	t.Parallel()
	chrome := findChromium(t)
	c := cli{t, pgtest.NewURL(t)}
	c.mustRun("load", "--tiers", vectors+"tiers.csv", "--records", vectors+"records.csv")
	app := fmt.Sprintf("browser-report-%d", time.Now().UnixNano()%1e9)
	holder := pgtest.Open(t, c.dsn, dbconn.Options{ApplicationName: app, MaxOpenConns: 1})
	ctx := context.Background()
	tx, err := holder.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "SELECT count(*) FROM baton.tasks WHERE partition_key <> 'S3cret'"); err != nil {
		t.Fatal(err)
	}
	cmd := c.command("ui", "--addr", "127.0.0.1:0", "--log-format", "json", "--horizon-warn-after", "1ms")
	base := consoleURLOf(t, cmd)

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chrome), chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 1000), chromedp.Flag("disable-dev-shm-usage", true),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	if err := chromedp.Do(bctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("starting %s: %v", chrome, err)
	}
	wait := func(what, js string) {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, 90*time.Second)
		defer cancel()
		pollPage(t, sctx, what, js)
	}
	sctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx, chromedp.Navigate(base+"/")); err != nil {
		t.Fatal(err)
	}
	wait("the warning naming the held transaction, in red", fmt.Sprintf(`(() => {
		const w = document.querySelector('#horizon-warning');
		const card = document.querySelector('#horizon-age .value');
		const rows = [...document.querySelectorAll('#horizon-holders tr.over')].map(r => r.textContent);
		return !!w && w.textContent.includes('holds back the xmin horizon') && !!card &&
			getComputedStyle(card).color === 'rgb(197, 48, 48)' && rows.some(r => r.includes(%q) && r.includes('idle in transaction'));
	})()`, app))
	body, err := chromedp.Run(sctx, chromedp.Text(chromedp.CSS(`#live`)))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(body, "S3cret") {
		t.Fatalf("the page shows the query's literal:\n%s", body)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	wait("the live page dropping the ended transaction", fmt.Sprintf(`(() => {
		const t = document.querySelector('#live').textContent;
		return t.includes('Vacuum') && !t.includes(%q);
	})()`, app))
}

// consoleURLOf starts cmd, a "worker ui --log-format json" command, and
// returns the console's address from its log.
func consoleURLOf(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	out, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var e struct{ Msg, URL string }
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Msg == "serving the console" {
			go func() { _, _ = io.Copy(io.Discard, out) }()
			return strings.TrimSuffix(e.URL, "/")
		}
	}
	t.Fatalf("worker ui exited without serving: %v", sc.Err())
	return ""
}
