package probe

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// 200 succeeds with its status line; anything else fails, with the body
// when asked for it, and never shows a password of the URL.
func TestGet(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("database unreachable"))
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	ctx := context.Background()
	status, body, err := Get(ctx, srv.URL+"/healthz", time.Second, true)
	if err != nil || status != "200 OK" || string(body) != "ok" {
		t.Errorf("healthz: %q, %q, %v", status, body, err)
	}
	withPassword := strings.Replace(srv.URL, "http://", "http://u:s3cret@", 1) + "/readyz"
	if _, _, err := Get(ctx, withPassword, time.Second, false); err == nil ||
		!strings.Contains(err.Error(), "503 Service Unavailable (--verbose shows the response)") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("readyz: %v", err)
	}
	if _, _, err := Get(ctx, srv.URL+"/readyz", time.Second, true); err == nil || !strings.HasSuffix(err.Error(), "\ndatabase unreachable") {
		t.Errorf("readyz with its body: %v", err)
	}
}
