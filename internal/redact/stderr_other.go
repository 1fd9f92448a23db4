//go:build !unix

package redact

import "os"

// A Guard is the process's standard error. Where file descriptors cannot
// be rearranged (not Unix) nothing is filtered: only what goes through a
// Writer or Handler is redacted, and a recover in the main goroutine is
// all that redacts a panic.
type Guard struct {
	// Stderr is the process's standard error.
	Stderr *os.File
}

// GuardStderr returns the process's standard error as it is.
func GuardStderr(dsns ...string) (*Guard, error) { return &Guard{Stderr: os.Stderr}, nil }

// Close does nothing.
func (g *Guard) Close() error { return nil }

// ServeStderrFilter reports false: no filter process is ever started.
func ServeStderrFilter() bool { return false }
