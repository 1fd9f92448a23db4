package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestEverySlotsAreAlignedToTheEpoch(t *testing.T) {
	s := everySlots((5 * time.Second).Microseconds())
	at := time.Date(2026, 1, 2, 3, 4, 7, 300, time.UTC)
	if got, want := s.Next(at), time.Date(2026, 1, 2, 3, 4, 10, 0, time.UTC); !got.Equal(want) {
		t.Fatalf("Next(%s) = %s, want %s", at, got, want)
	}
	// Strictly after: a slot time gives the following slot.
	slot := time.Date(2026, 1, 2, 3, 4, 10, 0, time.UTC)
	if got, want := s.Next(slot), slot.Add(5*time.Second); !got.Equal(want) {
		t.Fatalf("Next(%s) = %s, want %s", slot, got, want)
	}
}

func TestLatestDue(t *testing.T) {
	from := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	now := from.Add(17*time.Minute + 3*time.Second)
	every := everySlots(time.Minute.Microseconds())
	if got, want := latestDue(every, from, now), from.Add(17*time.Minute); !got.Equal(want) {
		t.Fatalf("every: latest due = %s, want %s", got, want)
	}
	c, err := parseCron("*/5 * * * *")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := latestDue(cronSlots{c}, from, now), from.Add(15*time.Minute); !got.Equal(want) {
		t.Fatalf("cron: latest due = %s, want %s", got, want)
	}
	// Nothing later due: the slot itself.
	if got := latestDue(cronSlots{c}, from, from.Add(time.Minute)); !got.Equal(from) {
		t.Fatalf("cron: latest due = %s, want %s", got, from)
	}
}

func TestDefinitionValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    Definition
		want string // the field error's message; empty: valid
	}{
		{"every", Definition{Name: "a", Every: time.Second}, ""},
		{"cron", Definition{Name: "a", Cron: "*/5 * * * *", Mode: ModeLeader, Missed: MissedCatchUp}, ""},
		{"both", Definition{Name: "a", Every: time.Second, Cron: "* * * * *"}, "job a: every and cron: give one, not both"},
		{"neither", Definition{Name: "a"}, "job a: every and cron: give one (an interval or a cron expression)"},
		{"not microseconds", Definition{Name: "a", Every: time.Second + time.Nanosecond}, "job a: every 1.000000001s: want a positive whole number of microseconds"},
		{"bad cron", Definition{Name: "a", Cron: "every tuesday"}, `job a: cron "every tuesday": `},
		{"bad name", Definition{Name: "a b", Every: time.Second}, `job a b: name "a b": want 1-64`},
		{"bad mode", Definition{Name: "a", Every: time.Second, Mode: "auto"}, `job a: mode "auto": want lock, expire or leader`},
		{"bad missed", Definition{Name: "a", Every: time.Second, Missed: "all"}, `job a: missed "all": want skip or catch-up`},
		{"short most", Definition{Name: "a", Every: time.Second, LockAtMostFor: time.Microsecond}, "job a: lock-at-most-for 1µs: want at least 1ms"},
		{"negative least", Definition{Name: "a", Every: time.Second, LockAtLeastFor: -time.Second}, "job a: lock-at-least-for -1s: must not be negative"},
		{"command and builtin", Definition{Name: "a", Every: time.Second, Command: []string{"true"}, Builtin: "verify"}, "job a: command and builtin: give one, not both"},
	} {
		err := tc.d.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: Validate() = %v, want nil", tc.name, err)
			}
			continue
		}
		fe, ok := errors.AsType[*FieldError](err)
		if !ok || !strings.HasPrefix(fe.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v, want a FieldError %q", tc.name, err, tc.want)
		}
	}
	// A command line names its flags.
	err := Definition{Name: "a", Every: time.Second, Mode: "auto"}.Validate()
	fe, _ := errors.AsType[*FieldError](err)
	if got := fe.Format(func(f string) string { return "--" + f }); got != `--mode "auto": want lock, expire or leader` {
		t.Errorf("Format = %q", got)
	}
}
