package faults

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/batonhq/baton/internal/redact"
)

// sqlPassword is a password in a statement the server logged (CREATE or
// ALTER ROLE ... PASSWORD '...'), which the DSN redactor does not know.
var sqlPassword = regexp.MustCompile(`(?i)(password\s+)('(?:[^']|'')*'|\S+)`)

// redactor removes from a log every password: the soak's database URL's,
// any other URL's or key=value one, and any in a logged statement.
func (s *soak) redactor() func(string) string {
	r := redact.New(s.r.dsn)
	return func(text string) string {
		return sqlPassword.ReplaceAllString(r.String(text), "${1}xxxxx")
	}
}

// serverLogs are the database servers' log files: the soak's server, or
// every node of the HA formation (and its monitor), by the name each is
// kept under.
func (s *soak) serverLogs() map[string][]string {
	out := map[string][]string{}
	if s.srv != nil {
		out["server"] = []string{filepath.Join(s.srv.Dir(), "server.log")}
	}
	if s.paf != nil {
		for _, n := range append([]*pafNode{s.paf.monitor}, s.paf.nodes...) {
			files, _ := filepath.Glob(filepath.Join(n.dir, "log", "*"))
			out[n.name] = append(files, filepath.Join(n.dir, "startup.log"))
		}
	}
	return out
}

// keepServerLogs copies the database servers' logs, passwords redacted,
// into dir/server: the server's side of a failure (a backend that died, a
// session it ended, a statement it refused) that the processes' logs only
// see as a lost connection.
func (s *soak) keepServerLogs(dir string) error {
	clean := s.redactor()
	var errs []error
	for name, files := range s.serverLogs() {
		for _, f := range files {
			b, err := os.ReadFile(f)
			switch {
			case errors.Is(err, os.ErrNotExist):
				continue
			case err != nil:
				errs = append(errs, fmt.Errorf("reading the server log %s: %w", f, err))
				continue
			}
			dst := filepath.Join(dir, "server", name+"-"+filepath.Base(f))
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return fmt.Errorf("keeping the server logs: %w", err)
			}
			errs = append(errs, os.WriteFile(dst, []byte(clean(string(b))), 0o644))
		}
	}
	return errors.Join(errs...)
}

// The evidence kept of a failed soak holds no password: not the database
// URL's, nor one in a statement the server logged.
func TestSoakEvidenceRedactsPasswords(t *testing.T) {
	t.Parallel()
	s := &soak{r: &run{dsn: "postgres://baton:S3cret@127.0.0.1:5432/baton"}}
	clean := s.redactor()
	in := `worker: connecting to postgres://baton:S3cret@127.0.0.1:5432/baton
ERROR:  role "x" does not exist
STATEMENT:  ALTER ROLE x PASSWORD 'it''s secret' LOGIN
STATEMENT:  CREATE ROLE y WITH LOGIN PASSWORD 'p4ss'
host=db password=kv-secret
`
	got := clean(in)
	for _, secret := range []string{"S3cret", "it''s secret", "p4ss", "kv-secret"} {
		if strings.Contains(got, secret) {
			t.Errorf("%q left in:\n%s", secret, got)
		}
	}
	if !strings.Contains(got, `ERROR:  role "x" does not exist`) || !strings.Contains(got, "LOGIN PASSWORD xxxxx") {
		t.Errorf("more than the passwords went:\n%s", got)
	}
}
