package pricer

import (
	"slices"
	"testing"
)

func drain(next func() (int, bool)) []int {
	var out []int
	for i, ok := next(); ok; i, ok = next() {
		out = append(out, i)
	}
	return out
}

func TestInterleavedIsTwoAscendingPassesOfEveryRow(t *testing.T) {
	for _, n := range []int{0, 1, 2, 8, 9, 10, 17, 18, 1000, 1024} {
		got := drain(interleaved(n))
		if len(got) != n {
			t.Fatalf("n=%d: %d indexes, want %d: %v", n, len(got), n, got)
		}
		seen := make([]bool, n)
		pass, last := 0, -1
		for k, i := range got {
			if i < 0 || i >= n || seen[i] {
				t.Fatalf("n=%d: index %d at %d is out of range or repeated: %v", n, i, k, got)
			}
			seen[i] = true
			if p := i % 9 % 2; p != pass {
				if p < pass {
					t.Fatalf("n=%d: index %d (first pass) after the second pass began: %v", n, i, got)
				}
				pass, last = p, -1
			}
			if i <= last {
				t.Fatalf("n=%d: index %d after %d in one pass: %v", n, i, last, got)
			}
			last = i
		}
	}
	if got, want := drain(interleaved(20)), []int{0, 2, 4, 6, 8, 9, 11, 13, 15, 17, 18, 1, 3, 5, 7, 10, 12, 14, 16, 19}; !slices.Equal(got, want) {
		t.Errorf("interleaved(20) = %v, want %v", got, want)
	}
	if got, want := drain(inOrder(3)), []int{0, 1, 2}; !slices.Equal(got, want) {
		t.Errorf("inOrder(3) = %v, want %v", got, want)
	}
}
