package partition

import (
	"slices"
	"testing"
)

// Each lock statement of a rewind names, of the partitions already
// locked, those whose segments can sort between the previous key and its
// own: the previous key and the rewind's keys that are prefixes of it.
// Checked against every partition's segments placed among the keys.
func TestRewindLockArgsNameThePartitionsWhoseSegmentsComeNext(t *testing.T) {
	keys := []string{"a", "a!", "a$", "ab", "b", "b#x", "c"}
	slices.Sort(keys)
	held := heldKeys(keys)
	s := NewStore(nil, "")
	for i := range keys {
		args := s.rewindLockArgs(keys, held, i, "$")
		got := args[2].([]string)
		after := args[3].(string)
		// want: the partitions before i with a segment between after
		// and keys[i].
		var want []string
		for _, p := range keys[:i] {
			first, last := SegmentKey(p, 0), SegmentKey(p, 1<<62)
			if last > after && first < keys[i] {
				want = append(want, p)
			}
		}
		for _, w := range want {
			if !slices.Contains(got, w) {
				t.Errorf("key %q (after %q): names %q, missing %q, whose segments lie between", keys[i], after, got, w)
			}
		}
		for _, g := range got {
			if !slices.Contains(keys[:i], g) {
				t.Errorf("key %q: names %q, not a partition locked before it", keys[i], g)
			}
		}
		if i > 0 && len(got) > len(after)+1 {
			t.Errorf("key %q: names %d partitions", keys[i], len(got))
		}
	}
}
