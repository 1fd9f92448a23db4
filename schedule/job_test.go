package schedule

import (
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
		ok   bool
	}{
		{"every", Definition{Name: "a", Every: time.Second}, true},
		{"cron", Definition{Name: "a", Cron: "*/5 * * * *", Mode: ModeLeader, Missed: MissedCatchUp}, true},
		{"both", Definition{Name: "a", Every: time.Second, Cron: "* * * * *"}, false},
		{"neither", Definition{Name: "a"}, false},
		{"bad cron", Definition{Name: "a", Cron: "every tuesday"}, false},
		{"bad name", Definition{Name: "a b", Every: time.Second}, false},
		{"bad mode", Definition{Name: "a", Every: time.Second, Mode: "auto"}, false},
		{"bad missed", Definition{Name: "a", Every: time.Second, Missed: "all"}, false},
		{"negative least", Definition{Name: "a", Every: time.Second, LockAtLeastFor: -time.Second}, false},
		{"command and builtin", Definition{Name: "a", Every: time.Second, Command: []string{"true"}, Builtin: "verify"}, false},
	} {
		err := tc.d.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}
