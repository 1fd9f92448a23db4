package taskstore

import (
	"math"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// A read that started before the floor was lowered (a notification, or a
// full read that found a row below it) may have missed the rows that
// lowering was for: it never raises the floor, though it may lower it. A
// full read sets the floor even below where it was.
func TestStaleReadsDoNotRaiseTheFloor(t *testing.T) {
	clock := clockwork.NewFakeClock()
	f := newClaimFloor(time.Second, time.Minute, clock.Now)
	secs := func(tm time.Time) float64 { return float64(tm.UnixMicro()) / 1e6 }
	base := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	floorAt := func() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.at }

	first := f.begin()
	if !first.full {
		t.Fatal("the first read is not a full one")
	}
	f.saw(first, secs(base.Add(100*time.Second)), secs(base.Add(200*time.Second)), true)
	if got, want := floorAt(), base.Add(99*time.Second); !got.Equal(want) {
		t.Fatalf("floor %v after a full read, want %v", got, want)
	}

	// A floored read starts; a notification lowers the floor for a row
	// that became claimable at 50s; the read, which may have missed it,
	// ends having found a row at 150s.
	inFlight := f.begin()
	if inFlight.full {
		t.Fatal("a read within the period is a full one")
	}
	f.lower(base.Add(50 * time.Second))
	f.saw(inFlight, secs(base.Add(150*time.Second)), secs(base.Add(210*time.Second)), true)
	if got, want := floorAt(), base.Add(49*time.Second); !got.Equal(want) {
		t.Fatalf("floor %v after a stale read, want %v (the notification's)", got, want)
	}
	// A read that started after the lowering raises it as usual.
	fresh := f.begin()
	f.saw(fresh, secs(base.Add(60*time.Second)), secs(base.Add(220*time.Second)), true)
	if got, want := floorAt(), base.Add(59*time.Second); !got.Equal(want) {
		t.Fatalf("floor %v after a fresh read, want %v", got, want)
	}

	// A full read that finds a row below the floor lowers it to that row;
	// a floored read that started before it ended cannot raise it again.
	clock.Advance(time.Minute)
	full := f.begin()
	before := f.begin()
	if !full.full || before.full {
		t.Fatalf("full reads: %v then %v, want true then false", full.full, before.full)
	}
	f.saw(full, secs(base.Add(30*time.Second)), secs(base.Add(230*time.Second)), false)
	if got, want := floorAt(), base.Add(29*time.Second); !got.Equal(want) {
		t.Fatalf("floor %v after a full read that found a row below it, want %v", got, want)
	}
	f.saw(before, secs(base.Add(90*time.Second)), secs(base.Add(231*time.Second)), true)
	if got, want := floorAt(), base.Add(29*time.Second); !got.Equal(want) {
		t.Fatalf("floor %v after a read that started before the full one ended, want %v", got, want)
	}

	// A full read that found nothing at all leaves the floor, and the
	// next reads start from it.
	clock.Advance(time.Minute)
	full = f.begin()
	f.saw(full, math.NaN(), 0, true)
	if next := f.begin(); next.full || !floorAt().Equal(base.Add(29*time.Second)) {
		t.Fatalf("after a full read that found nothing: floor %v, next read full %v; want %v, false", floorAt(), next.full, base.Add(29*time.Second))
	}

	// A full read that says nothing of the unowned rows (filled with stale
	// ones) leaves the next read full.
	clock.Advance(time.Minute)
	full = f.begin()
	f.saw(full, math.NaN(), secs(base.Add(300*time.Second)), false)
	if next := f.begin(); !next.full {
		t.Fatal("the read after an inconclusive full read is not a full one")
	}
}
