// Package testutil holds what every test package shares: timeouts that
// scale on slow machines, one wait helper, and one seed convention for
// randomized suites.
//
// Timeouts. Every timeout a test waits with goes through WaitTimeout, which
// multiplies it by BATON_TEST_TIMEOUT_SCALE (a number, default 1): on a slow
// or loaded machine, BATON_TEST_TIMEOUT_SCALE=3 gives every wait three
// times as long, without touching an assertion.
//
// Seeds. Every randomized suite takes its seed from Seed: BATON_SEED when
// set (to replay a failure), else a fresh one. The seed is logged, and a
// failing test ends with the line that replays it.
//
// Worker processes. A test package outside cmd/worker that runs real
// worker processes builds the binary once, in its TestMain, with
// BuildWorker. (cmd/worker's own tests run their test binary as the
// worker instead: it contains the command.)
package testutil

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// BuildWorker builds the worker command into dir and returns the binary's
// path. Build output goes to stderr.
func BuildWorker(dir string) (string, error) {
	bin := filepath.Join(dir, "worker")
	build := exec.Command("go", "build", "-o", bin, "github.com/batonhq/baton/cmd/worker")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("building the worker binary: %w", err)
	}
	return bin, nil
}

// TimeoutScaleEnv multiplies every WaitTimeout.
const TimeoutScaleEnv = "BATON_TEST_TIMEOUT_SCALE"

// SeedEnv replays a randomized suite with a given seed.
const SeedEnv = "BATON_SEED"

// WaitTimeout is d scaled by BATON_TEST_TIMEOUT_SCALE.
func WaitTimeout(d time.Duration) time.Duration {
	v := os.Getenv(TimeoutScaleEnv)
	if v == "" {
		return d
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f <= 0 {
		panic(TimeoutScaleEnv + " must be a positive number, got " + strconv.Quote(v))
	}
	return time.Duration(float64(d) * f)
}

// PollInterval is how often Eventually re-checks its condition.
const PollInterval = 25 * time.Millisecond

// Eventually checks cond every PollInterval until it returns nil, and fails
// the test, with cond's last answer, if that takes longer than
// WaitTimeout(timeout). A non-nil answer says what is not there yet; a
// condition that finds something wrong for good fails the test itself.
// Eventually is for state that offers no notification (a row in the
// database, a process's output); where the code under test can signal,
// wait on the signal with Receive instead.
func Eventually(tb testing.TB, timeout time.Duration, what string, cond func() error) {
	tb.Helper()
	limit := WaitTimeout(timeout)
	timer := time.NewTimer(limit)
	defer timer.Stop()
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return
		}
		select {
		case <-timer.C:
			tb.Fatalf("%s: not within %s: %v", what, limit, err)
		case <-tick.C:
		}
	}
}

// Receive waits for a value on ch for at most WaitTimeout(timeout), and
// fails the test otherwise.
func Receive[T any](tb testing.TB, ch <-chan T, timeout time.Duration, what string) T {
	tb.Helper()
	limit := WaitTimeout(timeout)
	select {
	case v := <-ch:
		return v
	case <-time.After(limit):
		tb.Fatalf("%s: not within %s", what, limit)
		panic("unreachable")
	}
}

// Seed returns the seed of a randomized test: BATON_SEED when set, else a
// new one. It logs the seed, and if the test fails, how to replay it.
func Seed(tb testing.TB) int64 {
	tb.Helper()
	seed := rand.Int64N(1 << 62) // room to add schedule numbers without overflow
	if v := os.Getenv(SeedEnv); v != "" {
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			tb.Fatalf("%s=%q: %v", SeedEnv, v, err)
		}
		seed = s
	}
	tb.Logf("seed %d", seed)
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("FAILED with seed %d: replay with %s=%d go test -run '%s'", seed, SeedEnv, seed, tb.Name())
		}
	})
	return seed
}
