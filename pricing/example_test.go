package pricing_test

import (
	"fmt"

	"github.com/batonhq/baton/pricing"
)

// The worked example of the pricing rules: 0% from 0, 5% from 10,000 and
// 10% from 50,000.
func ExampleCursor() {
	s, err := pricing.NewSchedule([]pricing.Tier{
		{ThresholdMinor: 0, DiscountBP: 0},
		{ThresholdMinor: 10000, DiscountBP: 500},
		{ThresholdMinor: 50000, DiscountBP: 1000},
	})
	if err != nil {
		panic(err)
	}
	c, err := s.Resume(0) // a contract with nothing priced yet
	if err != nil {
		panic(err)
	}
	for _, amount := range []int64{6000, 6000, 40000, 1} {
		line, err := c.Next(amount)
		if err != nil {
			panic(err)
		}
		exact, _ := s.ExactNet(c.CumGross())
		fmt.Printf("gross %5d  discount %4d  net %5d  cumulative %s -> %d\n",
			line.Gross, line.Discount, line.Net, exact, c.CumNet())
	}
	// Output:
	// gross  6000  discount    0  net  6000  cumulative 6000.0000 -> 6000
	// gross  6000  discount  100  net  5900  cumulative 11900.0000 -> 11900
	// gross 40000  discount 2100  net 37900  cumulative 49800.0000 -> 49800
	// gross     1  discount    0  net     1  cumulative 49800.9000 -> 49801
}

// Cumulative nets are rounded half to even, so with a 50% discount the
// records of 1 alternate between paying 0 and 1.
func ExampleSchedule_Rounded() {
	s, err := pricing.NewSchedule([]pricing.Tier{{ThresholdMinor: 0, DiscountBP: 5000}})
	if err != nil {
		panic(err)
	}
	for g := int64(1); g <= 4; g++ {
		exact, _ := s.ExactNet(g)
		r, _ := s.Rounded(g)
		fmt.Printf("G=%d exact %s rounded %d\n", g, exact, r)
	}
	// Output:
	// G=1 exact 0.5000 rounded 0
	// G=2 exact 1.0000 rounded 1
	// G=3 exact 1.5000 rounded 2
	// G=4 exact 2.0000 rounded 2
}
