package redact

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
)

func TestStringHidesPasswords(t *testing.T) {
	cases := []struct {
		name, dsn, text string
	}{
		{"malformed port", "postgres://baton:S3CRET@127.0.0.1:notaport/x",
			"parsing database URL postgres://baton:S3CRET@127.0.0.1:notaport/x: bad port"},
		{"at sign in password", "postgres://u:p@ss-word@db/x", "connecting to postgres://u:p@ss-word@db/x failed"},
		{"percent-encoded", "postgres://u:p%40ssw0rd@db/x", "password p@ssw0rd was refused; url postgres://u:p%40ssw0rd@db/x"},
		{"query parameter", "postgres://db/x?user=u&password=hunter22&sslmode=disable", "dsn postgres://db/x?user=u&password=hunter22&sslmode=disable"},
		{"key=value", "host=db user=u password=hunter22 dbname=x", "cannot parse host=db user=u password=hunter22 dbname=x"},
		{"key=value quoted", "host=db password='a b\\'c d' dbname=x", "cannot parse host=db password='a b\\'c d' dbname=x"},
		{"postgresql scheme, no dsn known", "", "postgresql://admin:topsecret@db:5432/x"},
		{"short password in a URL", "postgres://u:abc@db/x", "postgres://u:abc@db/x"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := New(c.dsn).String(c.text)
			for _, pw := range append(Passwords(c.dsn), "topsecret") {
				if len(pw) >= minLiteral && strings.Contains(got, pw) {
					t.Fatalf("%q still contains %q", got, pw)
				}
			}
			if !strings.Contains(got, Mask) {
				t.Fatalf("%q: nothing masked", got)
			}
			if strings.Contains(got, "abc@") {
				t.Fatalf("%q: short URL password kept", got)
			}
		})
	}
}

func TestStringKeepsOrdinaryText(t *testing.T) {
	for _, s := range []string{
		"connecting to postgres://baton@127.0.0.1:5432/x: refused",
		"postgres://db.example:5432/baton?sslmode=disable",
		"contract c-1 priced 1000 records",
		// A URL without a password, then an '@' further on the line.
		"claim postgres://db.example:5432/baton lease c-1@v3",
		"claim postgres://db.example:5432 lease c-1@v3",
		"claim postgres://[::1]:5432/baton lease c-1@v3",
		"claim http://db.example:8080/x?y=1 lease c-1@v3",
		// Already masked: a second pass leaves the rest of the line alone.
		`msg="connecting to postgres://u:xxxxx@h/db" lease=c-1@v3 dsn=postgres://u:xxxxx@h/db`,
	} {
		if got := New().String(s); got != s {
			t.Errorf("%q became %q", s, got)
		}
	}
}

func TestHandlerRedactsTextAndJSON(t *testing.T) {
	dsn := `postgres://baton:pa"ss\word@db:notaport/x`
	r := New(dsn)
	for _, format := range []string{"text", "json"} {
		var buf bytes.Buffer
		var h slog.Handler = slog.NewTextHandler(&buf, nil)
		if format == "json" {
			h = slog.NewJSONHandler(&buf, nil)
		}
		log := slog.New(r.Handler(h)).With("dsn", dsn).WithGroup("g")
		log.Error("failed on "+dsn, "error", fmt.Errorf("opening: %w", errors.New("bad "+dsn)),
			slog.Group("db", "url", dsn), "stringer", stringer(dsn))
		out := buf.String()
		for _, leak := range []string{`pa"ss\word`, `pa\"ss\\word`, "ss\\word", "ss\\\\word"} {
			if strings.Contains(out, leak) {
				t.Fatalf("%s log leaks %q:\n%s", format, leak, out)
			}
		}
		if strings.Count(out, Mask) < 5 {
			t.Fatalf("%s log: want every value masked:\n%s", format, out)
		}
	}
}

type stringer string

func (s stringer) String() string { return string(s) }

func TestWriter(t *testing.T) {
	var buf bytes.Buffer
	w := New("postgres://u:hunter22@db/x").Writer(&buf)
	fmt.Fprintln(w, "worker: connecting to postgres://u:hunter22@db/x: refused (hunter22)")
	if strings.Contains(buf.String(), "hunter22") {
		t.Fatal(buf.String())
	}
}

// A URL's password is everything between "://user:" and the URL's last
// '@', written with any characters, percent-encoded or not, whether or not
// the URL parses; key=value passwords may be quoted with spaces. Each case
// gives the exact text expected, with the redactor told the DSN (literal
// passwords too) and with patterns alone.
func TestStringHidesEveryPasswordShape(t *testing.T) {
	cases := []struct {
		name, dsn, text, want string
	}{
		{"space", "postgres://u:S3cret x@host/db",
			"parsing database URL postgres://u:S3cret x@host/db: net/url: invalid userinfo",
			"parsing database URL postgres://u:xxxxx@host/db: net/url: invalid userinfo"},
		{"spaces only", "postgres://u:   @host/db", "postgres://u:   @host/db", "postgres://u:xxxxx@host/db"},
		{"at signs", "postgres://u:p@ss@w0rd@db/x", "connecting to postgres://u:p@ss@w0rd@db/x failed",
			"connecting to postgres://u:xxxxx@db/x failed"},
		{"slashes", "postgres://u:a/b/c9@db/x", "postgres://u:a/b/c9@db/x", "postgres://u:xxxxx@db/x"},
		{"digits then a slash", "postgres://u:12/ab@db/x", "postgres://u:12/ab@db/x", "postgres://u:xxxxx@db/x"},
		{"hash", "postgres://u:pa#ss@db/x", "dsn postgres://u:pa#ss@db/x", "dsn postgres://u:xxxxx@db/x"},
		{"question mark", "postgres://u:pa?ss=1&x@db/x", "dsn postgres://u:pa?ss=1&x@db/x", "dsn postgres://u:xxxxx@db/x"},
		{"colons", "postgres://u:pa:ss:99@db:5432/x", "dsn postgres://u:pa:ss:99@db:5432/x", "dsn postgres://u:xxxxx@db:5432/x"},
		{"everything at once", "postgres://u:p @/#?: w@db:5432/x?sslmode=disable",
			"open postgres://u:p @/#?: w@db:5432/x?sslmode=disable: refused",
			"open postgres://u:xxxxx@db:5432/x?sslmode=disable: refused"},
		{"quotes", `postgres://u:pa"ss'w ` + "`" + `d@db/x`, `parsing database URL postgres://u:pa"ss'w ` + "`" + `d@db/x: bad`,
			"parsing database URL postgres://u:xxxxx@db/x: bad"},
		{"quoted by %q", "postgres://u:S3cret x@host/db", `bad URL "postgres://u:S3cret x@host/db"`,
			`bad URL "postgres://u:xxxxx@host/db"`},
		{"percent-encoded, decoded in the text", "postgres://u:p%40%2F%23%3F%3A%20w@db/x",
			"postgres://u:p%40%2F%23%3F%3A%20w@db/x: password p@/#?: w refused",
			"postgres://u:xxxxx@db/x: password xxxxx refused"},
		{"two URLs on a line", "postgres://u:S3cret x@h1/db",
			"from postgres://u:S3cret x@h1/db to postgres://v:0ther pw@h2/db",
			"from postgres://u:xxxxx@h1/db to postgres://v:xxxxx@h2/db"},
		{"a scheme inside the password", "postgres://u:a://b:c@h/db", "postgres://u:a://b:c@h/db", "postgres://u:xxxxx@h/db"},
		{"empty user", "postgres://:S3cret x@h/db", "postgres://:S3cret x@h/db", "postgres://:xxxxx@h/db"},
		{"key=value quoted with spaces", "host=db user=u password='a b c' dbname=x",
			"cannot parse host=db user=u password='a b c' dbname=x: invalid port",
			"cannot parse host=db user=u password='xxxxx' dbname=x: invalid port"},
		{"key=value escaped quote", `host=db password='a b\'c d' dbname=x`, `cannot parse host=db password='a b\'c d' dbname=x`,
			"cannot parse host=db password='xxxxx' dbname=x"},
		{"query parameter", "postgres://db/x?user=u&password=S3cret%20x", "dsn postgres://db/x?user=u&password=S3cret%20x&sslmode=disable",
			"dsn postgres://db/x?user=u&password=xxxxx&sslmode=disable"},
		{"masked by a driver up to its first '@'", "postgres://u:p@ss/w#rd?x@host:notaport/db",
			"parsing postgres://u:p@ss/w#rd?x@host:notaport/db: cannot parse `postgres://u:xxxxx@ss/w#rd?x@host:notaport/db`: bad query \"x@host:notaport/db\"",
			"parsing postgres://u:xxxxx@host:notaport/db: cannot parse `postgres://u:xxxxx@host:notaport/db`: bad query \"x@host:notaport/db\""},
		{"one line of several", "postgres://u:S3cret x@h/db", "first line\nurl postgres://u:S3cret x@h/db\nlast line user@example",
			"first line\nurl postgres://u:xxxxx@h/db\nlast line user@example"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			redactors := []*Redactor{New(c.dsn), New(), nil}
			// Only a redactor that knows the DSN can tell a password
			// standing alone in the text.
			if c.name == "percent-encoded, decoded in the text" {
				redactors = redactors[:1]
			}
			for _, r := range redactors {
				got := r.String(c.text)
				if got != c.want {
					t.Fatalf("knowing %d secrets:\n got %q\nwant %q", len(r.secretsOrNone()), got, c.want)
				}
				if again := r.String(got); again != got {
					t.Fatalf("cleaning twice changed %q to %q", got, again)
				}
			}
		})
	}
}

func (r *Redactor) secretsOrNone() []string {
	if r == nil {
		return nil
	}
	return r.secrets
}

// The passwords of a DSN, whatever their characters, are found for literal
// replacement, as written and percent-decoded.
func TestPasswords(t *testing.T) {
	for _, c := range []struct {
		dsn  string
		want []string
	}{
		{"postgres://u:S3cret x@host/db", []string{"S3cret x"}},
		{"postgres://u:p@ss/w#r?d:1@host:5432/db", []string{"p@ss/w#r?d:1"}},
		{"postgres://u:p%40ss%20x@host/db", []string{"p%40ss%20x", "p@ss x"}},
		{"host=db password='a b' dbname=x", []string{"a b"}},
		{"postgres://u@host:5432/db", nil},
		{"postgres://host:5432/db", nil},
	} {
		got := Passwords(c.dsn)
		for _, w := range c.want {
			if !slices.Contains(got, w) {
				t.Errorf("Passwords(%q) = %q: %q missing", c.dsn, got, w)
			}
		}
		if len(c.want) == 0 && len(got) > 0 {
			t.Errorf("Passwords(%q) = %q, want none", c.dsn, got)
		}
	}
}
