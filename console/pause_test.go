package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// Pausing and resuming from the console need the token; a paused contract
// says so on its page and on the overview, with who and why, and the
// pause and resume are among the notable events; the kind is paused and
// resumed from the overview.
func TestPauseAndResumeFromTheConsole(t *testing.T) {
	t.Parallel()
	h, s, _ := newConsole(t, token)
	post := func(path string, form url.Values) int {
		t.Helper()
		c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := c.PostForm(h.URL+path, form)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	ctx := context.Background()
	paused := func() int {
		t.Helper()
		ps, err := s.Admin().Paused(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(ps)
	}
	if code := post("/contracts/c-held/pause", url.Values{"token": {"wrong"}, "reason": {"x"}}); code != http.StatusForbidden || paused() != 0 {
		t.Fatalf("pause with a wrong token = %d, %d pauses; want 403, none", code, paused())
	}
	if _, body := get(t, h.URL+"/contracts/c-held"); !strings.Contains(body, "pause-form") {
		t.Fatal("a contract that is not paused offers no pause form")
	}
	if code := post("/contracts/c-held/pause", url.Values{"token": {token}, "reason": {"tiers under review"}}); code != http.StatusSeeOther || paused() != 1 {
		t.Fatalf("pause with the token = %d, %d pauses; want 303, one", code, paused())
	}
	_, body := get(t, h.URL+"/contracts/c-held")
	if !strings.Contains(body, `id="paused"`) || !strings.Contains(body, "tiers under review") || !strings.Contains(body, "resume-form") {
		t.Fatalf("a paused contract's page does not show the pause and the resume form:\n%s", body)
	}
	_, body = get(t, h.URL+"/")
	if !strings.Contains(body, `id="paused"`) || !strings.Contains(body, "tiers under review") || !strings.Contains(body, `ev paused`) {
		t.Fatalf("the overview does not show the pause and its event:\n%s", body)
	}
	if code := post("/contracts/c-held/resume", url.Values{"token": {token}}); code != http.StatusSeeOther || paused() != 0 {
		t.Fatalf("resume with the token = %d, %d pauses; want 303, none", code, paused())
	}
	if code := post("/pause", url.Values{"token": {token}, "reason": {"freeze"}}); code != http.StatusSeeOther || paused() != 1 {
		t.Fatalf("pausing the kind = %d, %d pauses; want 303, one", code, paused())
	}
	if _, body := get(t, h.URL+"/contracts/c-done"); !strings.Contains(body, "with every contract of kind") {
		t.Fatal("a contract of a paused kind does not say so")
	}
	if code := post("/resume", url.Values{"token": {token}}); code != http.StatusSeeOther || paused() != 0 {
		t.Fatalf("resuming the kind = %d, %d pauses; want 303, none", code, paused())
	}
}
