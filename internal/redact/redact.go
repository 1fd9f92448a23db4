// Package redact keeps database credentials out of everything baton writes.
//
// One Redactor is built from the database URLs or key=value DSNs a command
// was given. Its String method is the single place text is cleaned: it
// replaces the password part of any URL (scheme://user:PASSWORD@...) and of
// any password=... pair, whether or not the text parses as a URL, and every
// literal occurrence of the passwords it was given (also percent-decoded),
// so that a message quoting a malformed URL, or a driver error echoing part
// of one, cannot leak the secret. A URL's password is everything between
// "://user:" and the URL's last "@", so that one written without
// percent-encoding ('@', '/', '#', '?', ':', spaces) is hidden whole: in
// running text, where a password with spaces leaves no telling where the
// URL ends, that is the last "@" before the end of the line or the next
// URL, which may hide more than the password but never less. Handler
// applies String to every log record before it is formatted (so JSON
// escaping cannot hide a password from it), Writer to any other output
// stream, and GuardStderr to everything the process writes to its standard
// error, the Go runtime's report of a crash included.
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
	// scheme://user: — where a URL's password begins. The user part holds
	// no '/', ':', '@', quote or space.
	urlUser = regexp.MustCompile("(?i)[a-z][a-z0-9+.-]*://([^/\\s:@\"'`]*):")
	// password=value, password = 'quoted value', and ?password=value&.
	kvPassword = regexp.MustCompile(`(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&"'` + "`" + `]+)`)
)

// urlPasswords returns the spans [start, end) of the URL passwords in s:
// from just after "scheme://user:" to the last '@' before the end of the
// line or the next "scheme://user:" after an '@', whichever comes first.
// A URL without
// an '@' there has no password; nor has one whose "user:" is a host and
// port ("db:5432/x", "[::1]:5432"), unless an '@' follows in the same
// word (a password such as "5432/x@"). A password already masked ends at
// the last '@' of its word, so that cleaning text twice (a log record,
// then the stream it is written to) does not reach past it.
func urlPasswords(s string) [][2]int {
	starts := urlUser.FindAllStringSubmatchIndex(s, -1)
	var out [][2]int
	for i, m := range starts {
		from := m[1]
		if len(out) > 0 && m[0] < out[len(out)-1][1] {
			continue // inside the password before
		}
		end := len(s)
		if nl := strings.IndexAny(s[from:], "\r\n"); nl >= 0 {
			end = from + nl
		}
		// The next URL bounds this one once this one has its '@';
		// before that, it is part of the password ("a://b:c").
		for _, next := range starts[i+1:] {
			if next[0] >= end {
				break
			}
			if strings.Contains(s[from:next[0]], "@") {
				end = next[0]
				break
			}
		}
		window := s[from:end]
		if rest, ok := strings.CutPrefix(window, Mask+"@"); ok {
			// Masked already, by this redactor or by a driver's own,
			// which may have stopped at the password's first '@': what
			// remains of it runs to the last '@' of the word.
			if sp := strings.IndexAny(rest, spaces); sp >= 0 {
				rest = rest[:sp]
			}
			if at := strings.LastIndexByte(rest, '@'); at >= 0 {
				out = append(out, [2]int{from, from + len(Mask) + 1 + at})
			}
			continue
		}
		at := strings.LastIndexByte(window, '@')
		if at < 0 {
			continue
		}
		if user := s[m[2]:m[3]]; strings.HasPrefix(user, "[") || isPort(window) {
			continue
		}
		out = append(out, [2]int{from, from + at})
	}
	return out
}

const spaces = " \t\n\v\f\r"

// isPort reports whether window, the text after "scheme://host:", starts
// with a port: digits ending the word or followed by '/', '?' or '#', and
// no '@' before the word ends.
func isPort(window string) bool {
	n := len(window) - len(strings.TrimLeft(window, "0123456789"))
	if n == 0 || n < len(window) && !strings.ContainsRune("/?#"+spaces, rune(window[n])) {
		return false
	}
	word := window
	if sp := strings.IndexAny(window, spaces); sp >= 0 {
		word = window[:sp]
	}
	return !strings.Contains(word, "@")
}

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
	for _, sp := range urlPasswords(dsn) {
		add(dsn[sp[0]:sp[1]])
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
	if spans := urlPasswords(s); len(spans) > 0 {
		var b strings.Builder
		last := 0
		for _, sp := range spans {
			b.WriteString(s[last:sp[0]])
			b.WriteString(Mask)
			last = sp[1]
		}
		b.WriteString(s[last:])
		s = b.String()
	}
	return kvPassword.ReplaceAllStringFunc(s, func(m string) string {
		sub := kvPassword.FindStringSubmatch(m)
		if sub[2] == Mask || sub[2] == "'"+Mask+"'" {
			return m
		}
		if strings.HasPrefix(sub[2], "'") {
			return sub[1] + "'" + Mask + "'"
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
