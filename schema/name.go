package schema

import (
	"errors"
	"fmt"
	"strings"
	"sync"
)

// Default is the PostgreSQL schema baton's objects live in when none is
// configured.
const Default = "baton"

// Placeholder stands for baton's schema in SQL text: baton's statements and
// migrations name their tables {{.Schema}}.tasks, {{.Schema}}.workers and
// so on, and SQL replaces it with the configured schema's quoted name. Every
// name is qualified in the statement itself, so nothing depends on the
// session's search_path (which a transaction-pooling proxy does not keep
// per client) and a host's own tables of the same names are never touched.
const Placeholder = "{{.Schema}}"

// Ident returns name (Default when empty) as a quoted SQL identifier.
func Ident(name string) string {
	if name == "" {
		name = Default
	}
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

type sqlKey struct{ name, query string }

// rewritten caches SQL's results: statements are rewritten once per schema,
// not on every execution.
var rewritten sync.Map // sqlKey → string

// SQL returns query with every Placeholder replaced by the quoted name of
// schema name (Default when empty). Results are cached, so it is cheap on
// hot paths.
func SQL(name, query string) string {
	k := sqlKey{name, query}
	if q, ok := rewritten.Load(k); ok {
		return q.(string)
	}
	q := strings.ReplaceAll(query, Placeholder, Ident(name))
	rewritten.Store(k, q)
	return q
}

// Validate reports whether name can hold baton's objects: empty (meaning
// Default) or an identifier PostgreSQL keeps as written, at most 63 bytes
// and not reserved for the system (pg_ prefix). Names are always quoted in
// SQL, so mixed case is kept; they are rejected only when PostgreSQL would
// refuse or silently truncate them.
func Validate(name string) error {
	switch {
	case name == "":
		return nil
	case len(name) > 63:
		return fmt.Errorf("schema name %q is longer than 63 bytes", name)
	case strings.HasPrefix(strings.ToLower(name), "pg_"):
		return fmt.Errorf("schema name %q: the pg_ prefix is reserved for system schemas", name)
	case strings.ContainsAny(name, "\x00\"."):
		return fmt.Errorf("schema name %q must not contain NUL, double quotes or dots", name)
	case strings.TrimSpace(name) != name:
		return errors.New("schema name must not start or end with white space")
	}
	return nil
}
