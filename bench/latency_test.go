package main

import (
	"encoding/json"
	"testing"
)

func TestLatencySplit(t *testing.T) {
	s := latencySplit(50, 350, 100)
	want := []int64{150, 250}
	if len(s.Points) != len(want) {
		t.Fatalf("points %v, want %v", s.Points, want)
	}
	for i, p := range s.Points {
		var st latencyState
		if err := json.Unmarshal(p.State, &st); err != nil {
			t.Fatal(err)
		}
		if p.Position != want[i] || st.At != want[i] {
			t.Errorf("point %d: position %d state %d, want %d", i, p.Position, st.At, want[i])
		}
	}
	var end latencyState
	if err := json.Unmarshal(s.End, &end); err != nil || end.At != 350 {
		t.Errorf("end %s, want at 350", s.End)
	}
	if s := latencySplit(0, 100, 100); len(s.Points) != 0 {
		t.Errorf("no point strictly inside (0, 100] every 100: got %v", s.Points)
	}
}
