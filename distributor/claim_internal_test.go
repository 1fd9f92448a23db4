package distributor

import (
	"slices"
	"testing"

	"github.com/batonhq/baton/partition"
)

func TestPickClaims(t *testing.T) {
	u := func(k string) partition.Candidate { return partition.Candidate{Key: k} }
	o := func(k string) partition.Candidate { return partition.Candidate{Key: k, Owned: true} }
	keys := func(cs []partition.Candidate) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Key)
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		cands      []partition.Candidate
		want, room int
		try, rest  []string
	}{
		{"below share takes unowned up to want", []partition.Candidate{u("a"), u("b"), u("c")}, 2, 5, []string{"a", "b"}, []string{"c"}},
		{"at share takes only a dead worker's", []partition.Candidate{u("a"), o("b"), u("c"), o("d")}, 0, 5, []string{"b", "d"}, []string{"a", "c"}},
		{"dead worker's beyond want, within room", []partition.Candidate{o("a"), o("b"), u("c")}, 1, 3, []string{"a", "b", "c"}, nil},
		{"room caps everything", []partition.Candidate{o("a"), o("b"), u("c")}, 1, 2, []string{"a", "b"}, []string{"c"}},
		{"no room", []partition.Candidate{o("a")}, 0, 0, nil, []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			try, rest := pickClaims(tc.cands, tc.want, tc.room)
			if !slices.Equal(keys(try), tc.try) || !slices.Equal(keys(rest), tc.rest) {
				t.Fatalf("pickClaims = %v, %v; want %v, %v", keys(try), keys(rest), tc.try, tc.rest)
			}
		})
	}
}
