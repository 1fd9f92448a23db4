package redact

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
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
