package ingest

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// collectRepeats adds entries to a key set of the given budget and returns
// what it yields, sorted, and the set's peak memory.
func collectRepeats(t *testing.T, budget int64, entries []keyEntry) ([]keyEntry, int64, error) {
	t.Helper()
	s := newKeySet(budget, func(n int64) int64 { return n })
	defer s.close()
	for _, e := range entries {
		s.add(e)
	}
	if s.err != nil {
		t.Fatal(s.err)
	}
	r, err := s.repeats()
	if err != nil {
		t.Fatal(err)
	}
	var got []keyEntry
	for {
		b, err := r.next()
		if err != nil {
			return got, s.peak, err
		}
		if b == nil {
			break
		}
		if len(b) > repeatBatch {
			t.Fatalf("a batch of %d entries, want at most %d", len(b), repeatBatch)
		}
		got = append(got, b...)
	}
	slices.SortFunc(got, compareEntries)
	return got, s.peak, nil
}

func compareEntries(x, y keyEntry) int {
	return cmp.Or(cmp.Compare(x.contract, y.contract), cmp.Compare(x.pos, y.pos), cmp.Compare(x.key, y.key))
}

// wantRepeats is what a key set must yield: every entry of a file row
// whose (key, contract) another entry has.
func wantRepeats(entries []keyEntry) []keyEntry {
	type kc struct {
		key      uint64
		contract uint32
	}
	n := map[kc]int{}
	for _, e := range entries {
		n[kc{e.key, e.contract}]++
	}
	var want []keyEntry
	for _, e := range entries {
		if !e.stored() && n[kc{e.key, e.contract}] > 1 {
			want = append(want, e)
		}
	}
	slices.SortFunc(want, compareEntries)
	return want
}

// The key set yields exactly the rows whose key repeats within their
// contract, in the file or among stored records: two copies far apart
// (the first row and the last, in the same bucket whatever the number of
// buckets), a row repeating a stored record, three copies of one key;
// equal keys of different contracts are no repeat. It does so with the
// entries in memory, in buckets of a temporary file, and in buckets split
// again because they outgrew the budget, within 13/16 of the budget.
func TestKeySetFindsRepeats(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	const n = 200_000
	var entries []keyEntry
	pos := map[uint32]uint32{}
	row := func(key uint64, contract uint32) keyEntry {
		e := keyEntry{key: key, contract: contract, pos: pos[contract]}
		pos[contract]++
		entries = append(entries, e)
		return e
	}
	first := row(r.Uint64(), 3)
	for range n {
		row(r.Uint64(), r.Uint32N(50))
	}
	triple := row(r.Uint64(), 7)
	row(triple.key, 7)
	row(first.key, 4) // the same key in another contract: no repeat
	storedKey := r.Uint64()
	entries = append(entries, keyEntry{key: storedKey, contract: 9, pos: storedPos})
	for range n / 10 { // other stored records, repeated by none
		entries = append(entries, keyEntry{key: r.Uint64(), contract: r.Uint32N(50), pos: storedPos})
	}
	row(storedKey, 9)
	row(triple.key, 7)
	row(first.key, 3)
	want := wantRepeats(entries)
	if len(want) != 6 {
		t.Fatalf("%d repeats planted, want 6: %v", len(want), want)
	}
	for _, budget := range []int64{64 << 20, 1 << 20, 64 << 10} {
		t.Run(fmt.Sprint(budget), func(t *testing.T) {
			t.Parallel()
			got, peak, err := collectRepeats(t, budget, entries)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("repeats %v, want %v", got, want)
			}
			if peak > budget*13/16 {
				t.Fatalf("the key set held %d bytes, more than 13/16 of %d", peak, budget)
			}
			if budget < 4<<20 && peak < budget/8 {
				t.Fatalf("the key set held %d bytes of %d: does it count its memory?", peak, budget)
			}
		})
	}
}

// Rows of a contract that all share one key are all yielded when they fit
// in memory (SQL then tells them apart); past that no bits of the key can
// split them, and the key set says so (the direct copy gives way).
func TestKeySetOneKey(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		n    int
		full bool
	}{{100, false}, {20_000, true}} {
		var entries []keyEntry
		for i := range c.n {
			entries = append(entries, keyEntry{key: 42, contract: 1, pos: uint32(i)})
		}
		entries = append(entries, keyEntry{key: 43, contract: 1, pos: uint32(c.n)})
		got, _, err := collectRepeats(t, 64<<10, entries)
		switch {
		case c.full && !errors.Is(err, errKeySetFull):
			t.Fatalf("%d rows of one key: %v, want errKeySetFull", c.n, err)
		case !c.full && (err != nil || len(got) != c.n):
			t.Fatalf("%d rows of one key: %d yielded, %v", c.n, len(got), err)
		}
	}
}

// With no repeats, nothing is yielded, from memory or from buckets.
func TestKeySetNoRepeats(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 8))
	var entries []keyEntry
	for i := range 50_000 {
		entries = append(entries, keyEntry{key: r.Uint64(), contract: uint32(i % 7), pos: uint32(i / 7)})
	}
	for _, budget := range []int64{64 << 20, 64 << 10} {
		if got, _, err := collectRepeats(t, budget, entries); err != nil || len(got) != 0 {
			t.Fatalf("budget %d: %v, %v; want none", budget, got, err)
		}
	}
}

// mayRepeat is true for the key of every file row added, whatever the
// budget, and false for most keys no file row has; stored entries leave
// no trace in it.
func TestKeySetMayRepeat(t *testing.T) {
	for _, budget := range []int64{1 << 10, 1 << 20, 128 << 20} {
		s := newKeySet(budget, func(n int64) int64 { return n })
		r := rand.New(rand.NewPCG(uint64(budget), 7))
		file := make([]uint64, 5000)
		for i := range file {
			file[i] = r.Uint64()
			s.add(keyEntry{key: file[i], contract: uint32(i % 3), pos: uint32(i)})
		}
		for range 5000 {
			s.add(keyEntry{key: r.Uint64(), pos: storedPos})
		}
		for _, k := range file {
			if !s.mayRepeat(k) {
				t.Fatalf("budget %d: a file row's key %x: mayRepeat is false", budget, k)
			}
		}
		passed := 0
		for range 100_000 {
			if s.mayRepeat(r.Uint64()) {
				passed++
			}
		}
		bits := len(s.seen) * 64
		// About 5000/bits of the other keys pass; allow twice that.
		if want := 2 * 100_000 * min(1, 5000/float64(bits)); float64(passed) > want+100 {
			t.Errorf("budget %d (%d bits): %d of 100,000 keys no file row has pass, want about %.0f", budget, bits, passed, want/2)
		}
		if s.peak > budget*13/16 && budget >= 16<<10 {
			t.Errorf("budget %d: held %d", budget, s.peak)
		}
		s.close()
	}
}
