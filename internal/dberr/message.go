package dberr

import (
	"regexp"
	"strings"
)

// tlsAttempt is pgx's account of the TLS attempt sslmode=prefer makes
// first; when the attempt without TLS that follows failed too, that one is
// the one that matters.
var tlsAttempt = regexp.MustCompile(`\n\t[^\n]*: tls error: [^\n]*`)

// Message is err's text without the TLS attempts of a connection error
// when another attempt is reported, a single remaining attempt put on the
// same line: the attempt that matters, on one line.
func Message(err error) string {
	s := err.Error()
	if !strings.Contains(s, "tls error: ") {
		return s
	}
	cut := tlsAttempt.ReplaceAllString(s, "")
	if !strings.Contains(cut, "\n\t") {
		return s // TLS was the only attempt: keep it
	}
	if strings.Count(cut, "\n\t") == 1 {
		cut = strings.Replace(cut, ":\n\t", ": ", 1)
	}
	return cut
}
