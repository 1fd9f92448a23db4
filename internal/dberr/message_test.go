package dberr

import (
	"errors"
	"testing"
)

// A connection error keeps the attempt that matters, on one line.
func TestMessageDropsTheRefusedTLSAttempt(t *testing.T) {
	t.Parallel()
	in := "failed to connect to `user=baton database=baton`:\n\t127.0.0.1:5432 (127.0.0.1): tls error: server refused TLS connection\n\t127.0.0.1:5432 (127.0.0.1): server error: FATAL: the database system is starting up (SQLSTATE 57P03)"
	want := "failed to connect to `user=baton database=baton`: 127.0.0.1:5432 (127.0.0.1): server error: FATAL: the database system is starting up (SQLSTATE 57P03)"
	if got := Message(errors.New(in)); got != want {
		t.Fatalf("Message:\n got %q\nwant %q", got, want)
	}
	plain := "failed to connect to `user=baton database=baton`: 127.0.0.1:5432 (127.0.0.1): dial error: connection refused"
	if got := Message(errors.New(plain)); got != plain {
		t.Fatalf("Message changed %q to %q", plain, got)
	}
}
