package main

import "testing"

func TestAddCountsAddsEveryField(t *testing.T) {
	a := events{Claimed: 1, Takeovers: 2, Released: 3, Lost: 4, Fenced: 5, Failed: 6}
	addCounts(&a, events{Claimed: 10, Takeovers: 20, Released: 30, Lost: 40, Fenced: 50, Failed: 60})
	if want := (events{11, 22, 33, 44, 55, 66}); a != want {
		t.Fatalf("events = %+v, want %+v", a, want)
	}
	f := takeoverFates{Takeovers: 1, HandedBack: 1}
	addCounts(&f, takeoverFates{Takeovers: 2, ToSurvivor: 1, ToSurvivorUnbatched: 1})
	if want := (takeoverFates{3, 1, 1, 1}); f != want {
		t.Fatalf("fates = %+v, want %+v", f, want)
	}
}
