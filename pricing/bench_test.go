package pricing_test

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/batonhq/baton/pricing"
)

// BenchmarkCursorNext measures pricing one record with a Cursor. Records
// average about 5,000 minor units and tiers are 100,000 apart, so a record
// crosses a tier boundary about once in twenty; the cursor starts over
// once it is past the last tier, so every tier count keeps crossing.
func BenchmarkCursorNext(b *testing.B) {
	for _, n := range []int{1, 8, 64} {
		b.Run("tiers="+strconv.Itoa(n), func(b *testing.B) {
			tiers := make([]pricing.Tier, n)
			for i := range tiers {
				tiers[i] = pricing.Tier{ThresholdMinor: int64(i) * 100_000, DiscountBP: int64(i) * 150}
			}
			s, err := pricing.NewSchedule(tiers)
			if err != nil {
				b.Fatal(err)
			}
			r := rand.New(rand.NewPCG(1, 2))
			amounts := make([]int64, 1024)
			for i := range amounts {
				amounts[i] = 1 + r.Int64N(10_000)
			}
			restartAt := max(int64(n)*100_000, 10_000_000)
			c, err := s.Resume(0)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := c.Next(amounts[i&1023]); err != nil {
					b.Fatal(err)
				}
				i++
				if c.CumGross() >= restartAt {
					if c, err = s.Resume(0); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
