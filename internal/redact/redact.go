// Package redact keeps database credentials out of everything baton writes.
//
// One Redactor is built from the database URLs or key=value DSNs a command
// was given. Its String method is the single place text is cleaned: it
// replaces the password part of any URL (scheme://user:PASSWORD@...) and of
// any password=... pair, whether or not the text parses as a URL, and every
// literal occurrence of the passwords it was given (also percent-decoded),
// so that a message quoting a malformed URL, or a driver error echoing part
// of one, cannot leak the secret. Handler applies it to every log record
// before it is formatted (so JSON escaping cannot hide a password from it),
// and Writer to any other output stream.
package redact

import (
	"context"
	"io"
	"log/slog"
	"net/url"
	"regexp"
	"sort"
	"strings"
)

// Mask replaces every redacted secret.
const Mask = "xxxxx"

// minLiteral is the shortest password replaced wherever it occurs. Shorter
// ones would mangle unrelated text; the URL and key=value patterns still
// catch them in their usual places.
const minLiteral = 4

var (
	// scheme://user:password@ — the password runs to the last '@' of the
	// token, so an unescaped '@' inside it is covered too.
	urlUserinfo = regexp.MustCompile("(?i)([a-z][a-z0-9+.-]*://[^/\\s:@\"'`]*:)([^\\s\"'`]*)@")
	// password=value, password = 'quoted value', and ?password=value&.
	kvPassword = regexp.MustCompile(`(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&"'` + "`" + `]+)`)
	// In a DSN on its own, quotes may be part of the password.
	dsnUserinfo = regexp.MustCompile(`(?i)[a-z][a-z0-9+.-]*://[^/\s:@]*:(\S*)@`)
)

// A Redactor removes credentials from text. The zero value and nil redact
// the URL and key=value patterns only.
type Redactor struct {
	secrets []string // longest first
}

// New returns a Redactor that also removes the passwords found in dsns
// (URL or key=value form, well-formed or not). Empty dsns are ignored.
func New(dsns ...string) *Redactor {
	r := &Redactor{}
	r.Add(dsns...)
	return r
}

// Add registers the passwords of more dsns.
func (r *Redactor) Add(dsns ...string) {
	seen := map[string]bool{}
	for _, s := range r.secrets {
		seen[s] = true
	}
	for _, dsn := range dsns {
		for _, pw := range Passwords(dsn) {
			if len(pw) >= minLiteral && !seen[pw] {
				seen[pw] = true
				r.secrets = append(r.secrets, pw)
			}
		}
	}
	sort.Slice(r.secrets, func(i, j int) bool { return len(r.secrets[i]) > len(r.secrets[j]) })
}

// Passwords returns the passwords written in dsn, as written and
// percent-decoded, found by pattern so that a DSN that does not parse still
// gives up its password.
func Passwords(dsn string) []string {
	var out []string
	add := func(s string) {
		s = strings.Trim(s, "'")
		if s == "" {
			return
		}
		out = append(out, s)
		if d, err := url.PathUnescape(s); err == nil && d != s {
			out = append(out, d)
		}
		if d, err := url.QueryUnescape(s); err == nil && d != s {
			out = append(out, d)
		}
	}
	for _, m := range dsnUserinfo.FindAllStringSubmatch(dsn, -1) {
		add(m[1])
	}
	for _, m := range kvPassword.FindAllStringSubmatch(dsn, -1) {
		v := m[2]
		if strings.HasPrefix(v, "'") {
			v = strings.ReplaceAll(strings.Trim(v, "'"), `\'`, `'`)
		}
		add(v)
	}
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok {
			add(pw)
		}
	}
	return out
}

// String returns s with every credential replaced by Mask.
func (r *Redactor) String(s string) string {
	if r != nil {
		for _, pw := range r.secrets {
			s = strings.ReplaceAll(s, pw, Mask)
		}
	}
	// Every log record's strings come here: most hold neither pattern's
	// literal part ("://", "="), and those cannot match, so the
	// expressions are not run on them.
	if !strings.Contains(s, "://") && !strings.Contains(s, "=") {
		return s
	}
	s = urlUserinfo.ReplaceAllString(s, "${1}"+Mask+"@")
	return kvPassword.ReplaceAllStringFunc(s, func(m string) string {
		sub := kvPassword.FindStringSubmatch(m)
		if sub[2] == Mask || sub[2] == "'"+Mask+"'" {
			return m
		}
		return sub[1] + Mask
	})
}

// Handler returns a slog.Handler that redacts every record's message and
// attribute values (errors included) before h formats them.
func (r *Redactor) Handler(h slog.Handler) slog.Handler { return &handler{r: r, h: h} }

type handler struct {
	r *Redactor
	h slog.Handler
}

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.h.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, h.r.String(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.h.Handle(ctx, out)
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		clean[i] = h.attr(a)
	}
	return &handler{r: h.r, h: h.h.WithAttrs(clean)}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{r: h.r, h: h.h.WithGroup(name)}
}

func (h *handler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.r.String(v.String()))
	case slog.KindGroup:
		group := v.Group()
		clean := make([]any, len(group))
		for i, g := range group {
			clean[i] = h.attr(g)
		}
		return slog.Group(a.Key, clean...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return slog.String(a.Key, h.r.String(x.Error()))
		case interface{ String() string }:
			return slog.String(a.Key, h.r.String(x.String()))
		case []byte:
			return slog.String(a.Key, h.r.String(string(x)))
		}
		// Other values (maps, slices, structs) are formatted by the inner
		// handler; only their text form can be checked.
		return slog.String(a.Key, h.r.String(v.String()))
	}
	return slog.Attr{Key: a.Key, Value: v}
}

// Writer returns an io.Writer that redacts each Write's text before passing
// it to w. Writes are expected to carry whole messages, as log lines and
// fmt.Fprint calls do.
func (r *Redactor) Writer(w io.Writer) io.Writer { return &writer{r: r, w: w} }

type writer struct {
	r *Redactor
	w io.Writer
}

func (w *writer) Write(p []byte) (int, error) {
	s := w.r.String(string(p))
	if _, err := io.WriteString(w.w, s); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Unwrap returns the writer being redacted into (to ask whether it is a
// terminal, for example).
func (w *writer) Unwrap() io.Writer { return w.w }
