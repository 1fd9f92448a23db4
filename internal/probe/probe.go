// Package probe is "worker probe", the health check for minimal container
// images: a GET of a worker's /readyz or /healthz that succeeds only on
// 200.
package probe

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// BodyLimit is the most of a response's body Get returns.
const BodyLimit = 64 << 10

// Get GETs rawURL within timeout and returns the response's status line
// and, with withBody, the first BodyLimit bytes of its body. A status other
// than 200 is an error, with the body when withBody; errors name the URL
// with any password hidden.
func Get(ctx context.Context, rawURL string, timeout time.Duration, withBody bool) (status string, body []byte, err error) {
	target := redactedURL(rawURL)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return "", nil, fmt.Errorf("probing %s: %w", target, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", nil, fmt.Errorf("probing %s: %w", target, err)
	}
	defer resp.Body.Close()
	if withBody {
		body, _ = io.ReadAll(io.LimitReader(resp.Body, BodyLimit))
	}
	switch {
	case resp.StatusCode == http.StatusOK:
		return resp.Status, body, nil
	case withBody && len(body) > 0:
		return resp.Status, body, fmt.Errorf("probing %s: %s\n%s", target, resp.Status, body)
	}
	return resp.Status, body, fmt.Errorf("probing %s: %s (--verbose shows the response)", target, resp.Status)
}

// redactedURL is rawURL with any password replaced by "xxxxx".
func redactedURL(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "the URL given"
	}
	return u.Redacted()
}
