package dbconn

import (
	"net"
	"path/filepath"
	"testing"
	"time"
)

// A Unix-domain socket has no TCP options: dialling one must not fail
// because the TCP user timeout cannot be set on it.
func TestUserTimeoutDialsUnixSockets(t *testing.T) {
	path := filepath.Join(t.TempDir(), ".s.PGSQL.5432")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatalf("listening on %s: %v", path, err)
	}
	defer ln.Close()
	d := &net.Dialer{Timeout: 5 * time.Second, Control: userTimeout(20 * time.Second)}
	c, err := d.Dial("unix", path)
	if err != nil {
		t.Fatalf("dialling a Unix socket with the user timeout set: %v", err)
	}
	c.Close()

	tln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening on TCP: %v", err)
	}
	defer tln.Close()
	c, err = d.Dial("tcp", tln.Addr().String())
	if err != nil {
		t.Fatalf("dialling TCP with the user timeout set: %v", err)
	}
	c.Close()
}
