package dbconn

import (
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// userTimeout makes the kernel fail a connection whose sent data stays
// unacknowledged for d (TCP_USER_TIMEOUT). Keepalives only probe an idle
// connection: a statement written to a peer that vanished would otherwise
// wait for TCP's retransmissions, about fifteen minutes, while the worker's
// heartbeat, on another connection, keeps its lease alive. Only TCP has the
// option: a Unix-domain socket (host=/run/postgresql) is dialled as it is.
func userTimeout(d time.Duration) func(network, address string, c syscall.RawConn) error {
	return func(network, _ string, c syscall.RawConn) error {
		if !strings.HasPrefix(network, "tcp") {
			return nil
		}
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d.Milliseconds()))
		})
		if err != nil {
			return err
		}
		return serr
	}
}
