package testutil

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestWaitTimeoutScales(t *testing.T) {
	for _, tc := range []struct {
		scale string
		want  time.Duration
	}{
		{"", 10 * time.Second},
		{"1", 10 * time.Second},
		{"2.5", 25 * time.Second},
	} {
		t.Run("scale="+tc.scale, func(t *testing.T) {
			t.Setenv(TimeoutScaleEnv, tc.scale)
			if got := WaitTimeout(10 * time.Second); got != tc.want {
				t.Errorf("WaitTimeout(10s) = %s, want %s", got, tc.want)
			}
		})
	}
}

// fatalTB records the failure of a helper instead of failing the test.
type fatalTB struct {
	testing.TB
	msg string
}

type stopped struct{}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = strings.TrimSpace(strings.ReplaceAll(format, "%", "")) // the shape is enough
	panic(stopped{})
}

func (f *fatalTB) Helper() {}

func failure(tb testing.TB, fn func(tb testing.TB)) (msg string) {
	f := &fatalTB{TB: tb}
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(stopped); !ok {
				panic(r)
			}
			msg = f.msg
		}
	}()
	fn(f)
	return ""
}

func TestEventually(t *testing.T) {
	t.Run("done", func(t *testing.T) {
		n := 0
		if msg := failure(t, func(tb testing.TB) {
			Eventually(tb, time.Minute, "three checks", func() error {
				if n++; n < 3 {
					return errors.New("not yet")
				}
				return nil
			})
		}); msg != "" || n != 3 {
			t.Errorf("failed %q after %d checks", msg, n)
		}
	})
	t.Run("times out", func(t *testing.T) {
		t.Setenv(TimeoutScaleEnv, "0.001")
		if msg := failure(t, func(tb testing.TB) {
			Eventually(tb, time.Minute, "never", func() error { return errors.New("still waiting") })
		}); !strings.Contains(msg, "not within") {
			t.Errorf("failure %q, want a timeout", msg)
		}
	})
}

func TestReceive(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 7
	if v := Receive(t, ch, time.Second, "a value"); v != 7 {
		t.Errorf("Receive = %d", v)
	}
	t.Setenv(TimeoutScaleEnv, "0.001")
	if msg := failure(t, func(tb testing.TB) { Receive(tb, ch, time.Second, "nothing") }); !strings.Contains(msg, "not within") {
		t.Errorf("failure %q, want a timeout", msg)
	}
}

func TestSeedReplays(t *testing.T) {
	t.Setenv(SeedEnv, "12345")
	if s := Seed(t); s != 12345 {
		t.Errorf("Seed = %d with %s=12345", s, SeedEnv)
	}
}
