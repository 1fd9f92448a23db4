package pricing_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/batonhq/baton/pricing"
)

func mustSchedule(tb testing.TB, tiers ...pricing.Tier) *pricing.Schedule {
	tb.Helper()
	s, err := pricing.NewSchedule(tiers)
	if err != nil {
		tb.Fatalf("NewSchedule(%v): %v", tiers, err)
	}
	return s
}

func mustResume(tb testing.TB, s *pricing.Schedule, g int64) *pricing.Cursor {
	tb.Helper()
	c, err := s.Resume(g)
	if err != nil {
		tb.Fatalf("Resume(%d): %v", g, err)
	}
	return c
}

func TestExamples(t *testing.T) {
	t.Parallel()
	threeTiers := []pricing.Tier{{0, 0}, {10000, 500}, {50000, 1000}}
	tests := []struct {
		name    string
		tiers   []pricing.Tier
		amounts []int64
		want    []pricing.Line
		exact   string // ExactNet of the final cumulative gross
	}{
		{
			name:    "worked example",
			tiers:   threeTiers,
			amounts: []int64{6000, 6000, 40000, 1},
			want:    []pricing.Line{{6000, 0, 6000}, {6000, 100, 5900}, {40000, 2100, 37900}, {1, 0, 1}},
			exact:   "49800.9000",
		},
		{
			name:    "worked example, implicit zero tier",
			tiers:   []pricing.Tier{{50000, 1000}, {10000, 500}},
			amounts: []int64{6000, 6000, 40000, 1},
			want:    []pricing.Line{{6000, 0, 6000}, {6000, 100, 5900}, {40000, 2100, 37900}, {1, 0, 1}},
			exact:   "49800.9000",
		},
		{
			name:    "ties to even",
			tiers:   []pricing.Tier{{0, 5000}},
			amounts: []int64{1, 1, 1, 1},
			want:    []pricing.Line{{1, 1, 0}, {1, 0, 1}, {1, 0, 1}, {1, 1, 0}},
			exact:   "2.0000",
		},
		{
			name:    "one record crosses every tier",
			tiers:   threeTiers,
			amounts: []int64{52001},
			want:    []pricing.Line{{52001, 2200, 49801}},
			exact:   "49800.9000",
		},
		{
			name:    "full discount",
			tiers:   []pricing.Tier{{0, 10000}},
			amounts: []int64{1, pricing.MaxAmount},
			want:    []pricing.Line{{1, 1, 0}, {pricing.MaxAmount, pricing.MaxAmount, 0}},
			exact:   "0.0000",
		},
		{
			// A rate that falls at higher volume can make one record's
			// discount negative: R(1) = round(0.5) = 0, R(2) = round(1.5) = 2.
			name:    "falling rate, negative discount from rounding",
			tiers:   []pricing.Tier{{0, 5000}, {1, 0}},
			amounts: []int64{1, 1},
			want:    []pricing.Line{{1, 1, 0}, {1, -1, 2}},
			exact:   "1.5000",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := mustSchedule(t, tt.tiers...)
			c := mustResume(t, s, 0)
			var g int64
			for i, a := range tt.amounts {
				got, err := c.Next(a)
				if err != nil {
					t.Fatalf("record %d: %v", i, err)
				}
				if got != tt.want[i] {
					t.Errorf("record %d (amount %d): got %+v, want %+v", i, a, got, tt.want[i])
				}
				single, err := s.Price(g, a)
				if err != nil || single != got {
					t.Errorf("record %d: Price(%d, %d) = %+v, %v; Cursor gave %+v", i, g, a, single, err, got)
				}
				g += a
			}
			exact, err := s.ExactNet(c.CumGross())
			if err != nil || exact != tt.exact {
				t.Errorf("ExactNet(%d) = %q, %v; want %q", c.CumGross(), exact, err, tt.exact)
			}
		})
	}
}

func TestRoundedAndExactNet(t *testing.T) {
	t.Parallel()
	s := mustSchedule(t, pricing.Tier{ThresholdMinor: 10000, DiscountBP: 500}, pricing.Tier{ThresholdMinor: 50000, DiscountBP: 1000})
	tests := []struct {
		g       int64
		rounded int64
		exact   string
	}{
		{0, 0, "0.0000"},
		{1, 1, "1.0000"},
		{10000, 10000, "10000.0000"},
		{10001, 10001, "10000.9500"},
		{10010, 10010, "10009.5000"}, // tie, 10010 is even
		{10030, 10028, "10028.5000"}, // tie, 10028 is even
		{52001, 49801, "49800.9000"},
		{math.MaxInt64, 8301034833169301226, "8301034833169301226.3000"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("gross=%d", tt.g), func(t *testing.T) {
			r, err := s.Rounded(tt.g)
			if err != nil || r != tt.rounded {
				t.Errorf("Rounded(%d) = %d, %v; want %d", tt.g, r, err, tt.rounded)
			}
			e, err := s.ExactNet(tt.g)
			if err != nil || e != tt.exact {
				t.Errorf("ExactNet(%d) = %q, %v; want %q", tt.g, e, err, tt.exact)
			}
		})
	}
	if _, err := s.Rounded(-1); !errors.Is(err, pricing.ErrNegativeGross) {
		t.Errorf("Rounded(-1): err %v, want ErrNegativeGross", err)
	}
	if _, err := s.ExactNet(-1); !errors.Is(err, pricing.ErrNegativeGross) {
		t.Errorf("ExactNet(-1): err %v, want ErrNegativeGross", err)
	}
	if _, err := s.Resume(-1); !errors.Is(err, pricing.ErrNegativeGross) {
		t.Errorf("Resume(-1): err %v, want ErrNegativeGross", err)
	}
	if _, err := s.Price(-1, 1); !errors.Is(err, pricing.ErrNegativeGross) {
		t.Errorf("Price(-1, 1): err %v, want ErrNegativeGross", err)
	}
}

func TestTiersSortedAsGiven(t *testing.T) {
	t.Parallel()
	in := []pricing.Tier{{50000, 1000}, {10000, 500}, {20000, 0}}
	s := mustSchedule(t, in...)
	want := []pricing.Tier{{10000, 500}, {20000, 0}, {50000, 1000}}
	got := s.Tiers()
	if !slices.Equal(got, want) {
		t.Fatalf("Tiers() = %v, want %v", got, want)
	}
	got[0].DiscountBP = 9999
	in[1].DiscountBP = 9999
	if !slices.Equal(s.Tiers(), want) {
		t.Fatalf("schedule changed through a caller's slice: %v", s.Tiers())
	}
}

func TestInvalidTiers(t *testing.T) {
	t.Parallel()
	tooMany := make([]pricing.Tier, pricing.MaxTiers+1)
	for i := range tooMany {
		tooMany[i] = pricing.Tier{ThresholdMinor: int64(i) * 100, DiscountBP: int64(i)}
	}
	tests := []struct {
		name  string
		tiers []pricing.Tier
	}{
		{"zero tiers", nil},
		{"empty slice", []pricing.Tier{}},
		{"negative threshold", []pricing.Tier{{0, 0}, {-1, 100}}},
		{"min int64 threshold", []pricing.Tier{{math.MinInt64, 100}}},
		{"duplicate threshold", []pricing.Tier{{0, 0}, {100, 100}, {100, 200}}},
		{"duplicate zero threshold", []pricing.Tier{{0, 0}, {0, 0}}},
		{"bp -1", []pricing.Tier{{0, -1}}},
		{"bp 10001", []pricing.Tier{{0, 0}, {5, 10001}}},
		{"65 tiers", tooMany},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := pricing.NewSchedule(tt.tiers)
			if !errors.Is(err, pricing.ErrInvalidTiers) || s != nil {
				t.Fatalf("NewSchedule: %v, %v; want ErrInvalidTiers", s, err)
			}
			t.Log(err)
		})
	}

	// The limits themselves are valid.
	valid := [][]pricing.Tier{
		tooMany[:pricing.MaxTiers],
		{{0, 10000}},
		{{math.MaxInt64, 0}},
		{{0, 0}, {math.MaxInt64, 10000}},
	}
	for _, tiers := range valid {
		if _, err := pricing.NewSchedule(tiers); err != nil {
			t.Errorf("NewSchedule(%d tiers, first %v): %v", len(tiers), tiers[0], err)
		}
	}
}

func TestInvalidTierErrorNamesTier(t *testing.T) {
	t.Parallel()
	tests := []struct {
		tiers []pricing.Tier
		want  string
	}{
		{[]pricing.Tier{{0, 0}, {7, 10001}}, "pricing: invalid tier schedule: tiers[1] (threshold_minor=7, discount_bp=10001): discount_bp outside 0..10000"},
		{[]pricing.Tier{{-3, 5}}, "pricing: invalid tier schedule: tiers[0] (threshold_minor=-3, discount_bp=5): threshold_minor is negative"},
		{[]pricing.Tier{{100, 1}, {0, 0}, {100, 2}}, "pricing: invalid tier schedule: tiers[0] and tiers[2] share threshold_minor=100"},
	}
	for i, tt := range tests {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			_, err := pricing.NewSchedule(tt.tiers)
			if err == nil || err.Error() != tt.want {
				t.Errorf("NewSchedule(%v): %v; want %q", tt.tiers, err, tt.want)
			}
		})
	}
}

func TestInvalidAmount(t *testing.T) {
	t.Parallel()
	s := mustSchedule(t, pricing.Tier{ThresholdMinor: 0, DiscountBP: 100})
	c := mustResume(t, s, 500)
	for _, a := range []int64{0, -1, math.MinInt64, pricing.MaxAmount + 1, math.MaxInt64} {
		if _, err := c.Next(a); !errors.Is(err, pricing.ErrInvalidAmount) {
			t.Errorf("Next(%d): %v, want ErrInvalidAmount", a, err)
		}
		if _, err := s.Price(500, a); !errors.Is(err, pricing.ErrInvalidAmount) {
			t.Errorf("Price(500, %d): %v, want ErrInvalidAmount", a, err)
		}
		if c.CumGross() != 500 || c.CumNet() != 495 {
			t.Fatalf("cursor moved after rejected amount %d: gross %d net %d", a, c.CumGross(), c.CumNet())
		}
	}
}

func TestOverflow(t *testing.T) {
	t.Parallel()
	const maxG = math.MaxInt64
	schedules := [][]pricing.Tier{
		{{0, 0}},
		{{0, 10000}},
		{{0, 1}},
		{{0, 9999}, {1 << 62, 3}, {maxG - 5, 7}},
		{{maxG, 10000}},
	}
	for _, tiers := range schedules {
		s := mustSchedule(t, tiers...)
		ref, err := newRefSchedule(tiers)
		if err != nil {
			t.Fatal(err)
		}
		c := mustResume(t, s, maxG-10)
		gross, net := c.CumGross(), c.CumNet()
		for _, a := range []int64{11, 12, pricing.MaxAmount} {
			if _, err := c.Next(a); !errors.Is(err, pricing.ErrOverflow) {
				t.Fatalf("%v: Next(%d) at %d: %v, want ErrOverflow", tiers, a, gross, err)
			}
			if c.CumGross() != gross || c.CumNet() != net {
				t.Fatalf("%v: cursor moved on overflow", tiers)
			}
			if _, err := s.Price(maxG-10, a); !errors.Is(err, pricing.ErrOverflow) {
				t.Fatalf("%v: Price(%d, %d): %v, want ErrOverflow", tiers, maxG-10, a, err)
			}
		}
		// Reaching exactly 2^63-1 works, in one step or several.
		line, err := c.Next(10)
		if err != nil {
			t.Fatalf("%v: Next(10) to MaxInt64: %v", tiers, err)
		}
		if want := ref.price(maxG-10, 10); line != want {
			t.Errorf("%v: got %+v, reference %+v", tiers, line, want)
		}
		if c.CumGross() != maxG || c.CumNet() != ref.roundedInt64(maxG) {
			t.Errorf("%v: at MaxInt64 gross %d net %d, reference net %d", tiers, c.CumGross(), c.CumNet(), ref.roundedInt64(maxG))
		}
		if _, err := c.Next(1); !errors.Is(err, pricing.ErrOverflow) {
			t.Errorf("%v: Next(1) at MaxInt64: %v, want ErrOverflow", tiers, err)
		}
		if r, err := s.Rounded(maxG); err != nil || r != c.CumNet() {
			t.Errorf("%v: Rounded(MaxInt64) = %d, %v; cursor %d", tiers, r, err, c.CumNet())
		}
		if e, err := s.ExactNet(maxG); err != nil || e != ref.exactNet(maxG) {
			t.Errorf("%v: ExactNet(MaxInt64) = %q, %v; reference %q", tiers, e, err, ref.exactNet(maxG))
		}
		c2 := mustResume(t, s, maxG)
		if c2.CumNet() != c.CumNet() {
			t.Errorf("%v: Resume(MaxInt64).CumNet() = %d, want %d", tiers, c2.CumNet(), c.CumNet())
		}
	}
}

func TestZeroCursor(t *testing.T) {
	t.Parallel()
	var c pricing.Cursor
	if _, err := c.Next(1); err == nil {
		t.Fatal("zero Cursor priced a record")
	}
}

func TestNextDoesNotAllocate(t *testing.T) {
	s := mustSchedule(t, pricing.Tier{ThresholdMinor: 0, DiscountBP: 0},
		pricing.Tier{ThresholdMinor: 1000, DiscountBP: 250},
		pricing.Tier{ThresholdMinor: 100000, DiscountBP: 700})
	c := mustResume(t, s, 0)
	amounts := []int64{1, 999, 7, 123456, 3}
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := c.Next(amounts[i%len(amounts)]); err != nil {
			t.Fatal(err)
		}
		i++
	})
	if allocs != 0 {
		t.Fatalf("Next allocates %v times per call", allocs)
	}
}
