//go:build !linux

package dbconn

import (
	"syscall"
	"time"
)

// userTimeout is a no-op where TCP_USER_TIMEOUT does not exist; keepalives
// still end idle dead connections.
func userTimeout(time.Duration) func(network, address string, c syscall.RawConn) error { return nil }
