package dberr

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/batonhq/baton/partition"
)

func TestClassification(t *testing.T) {
	pg := func(code string) error { return fmt.Errorf("running: %w", &pgconn.PgError{Code: code}) }
	for _, tc := range []struct {
		name               string
		err                error
		transient, unknown bool
	}{
		{"connection reset", &net.OpError{Op: "read", Err: errors.New("connection reset by peer")}, true, true},
		{"EOF", fmt.Errorf("reading reply: %w", io.ErrUnexpectedEOF), true, true},
		{"bad connection", driver.ErrBadConn, true, true},
		{"client deadline", context.DeadlineExceeded, true, true},
		{"checkpoint moved", fmt.Errorf("advancing: %w", partition.ErrCheckpointMoved), true, true},
		{"admin shutdown 57P01", pg("57P01"), true, false},
		{"statement timeout 57014", pg("57014"), true, false},
		{"connection failure 08006", pg("08006"), true, false},
		{"too many connections 53300", pg("53300"), true, false},
		{"lock timeout 55P03", pg("55P03"), true, false},
		{"deadlock 40P01", pg("40P01"), true, false},
		{"serialization 40001", pg("40001"), true, false},
		{"idle in transaction timeout 25P03", pg("25P03"), true, false},
		{"unique violation 23505", pg("23505"), false, false},
		{"syntax error 42601", pg("42601"), false, false},
		{"fenced", fmt.Errorf("fencing: %w", partition.ErrFenced), false, true},
		{"processor error", errors.New("bad tiers"), false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Transient(tc.err); got != tc.transient {
				t.Errorf("Transient(%v) = %v, want %v", tc.err, got, tc.transient)
			}
			if got := UnknownOutcome(tc.err); got != tc.unknown {
				t.Errorf("UnknownOutcome(%v) = %v, want %v", tc.err, got, tc.unknown)
			}
		})
	}
}

// The worker process's two questions: is the database out of reach (an
// outage, reported once), and does waiting for it make any sense.
func TestReachability(t *testing.T) {
	pg := func(code string) error { return fmt.Errorf("connecting: %w", &pgconn.PgError{Code: code}) }
	for _, tc := range []struct {
		name                   string
		err                    error
		unreachable, refusesMe bool
	}{
		{"connection refused", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, true, false},
		{"EOF", io.EOF, true, false},
		{"client deadline", fmt.Errorf("heartbeat: %w", context.DeadlineExceeded), true, false},
		{"shutting down 57P01", pg("57P01"), true, false},
		{"starting up 57P03", pg("57P03"), true, false},
		{"connection failure 08006", pg("08006"), true, false},
		{"pgx conn closed", errors.New("conn closed"), true, false},
		{"bad password 28P01", pg("28P01"), false, true},
		{"no such role 28000", pg("28000"), false, true},
		{"unknown database 3D000", pg("3D000"), false, true},
		{"statement timeout 57014", pg("57014"), false, false},
		{"unique violation 23505", pg("23505"), false, false},
		{"fenced", fmt.Errorf("fencing: %w", partition.ErrFenced), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Unreachable(tc.err); got != tc.unreachable {
				t.Errorf("Unreachable(%v) = %v, want %v", tc.err, got, tc.unreachable)
			}
			if got := RefusesClient(tc.err); got != tc.refusesMe {
				t.Errorf("RefusesClient(%v) = %v, want %v", tc.err, got, tc.refusesMe)
			}
		})
	}
}
