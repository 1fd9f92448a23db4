package pricing_test

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/batonhq/baton/pricing"
)

// Fuzz inputs are byte strings decoded into tiers and amounts, so that
// byte-level mutation explores schedules of any size.
//
// A tier takes tierSize bytes: a shift byte, an 8-byte big-endian value
// and a 2-byte big-endian rate code. The threshold is the value's low 63
// bits shifted right by shift%64 (so small thresholds are common), negated
// when the shift byte is 0xff. Rate code c gives discount_bp c-1 when
// c <= 10002 (so 0 and 10002 are the invalid -1 and 10001), c%10001
// otherwise.
//
// An amount takes amountSize bytes, big-endian, reduced modulo
// MaxAmount+2, so 0 and MaxAmount+1 (both invalid) can occur.
const (
	tierSize   = 11
	amountSize = 6
	// Bounds that keep one fuzz input cheap: the reference is slow.
	fuzzMaxTiers   = pricing.MaxTiers + 2
	fuzzMaxAmounts = 64
)

func decodeTiers(b []byte) []pricing.Tier {
	var tiers []pricing.Tier
	for len(b) >= tierSize && len(tiers) < fuzzMaxTiers {
		shift := b[0]
		th := int64(binary.BigEndian.Uint64(b[1:9])&math.MaxInt64) >> (shift % 64)
		if shift == 0xff {
			th = -th
		}
		code := int64(binary.BigEndian.Uint16(b[9:11]))
		bp := code % 10001
		if code <= 10002 {
			bp = code - 1
		}
		tiers = append(tiers, pricing.Tier{ThresholdMinor: th, DiscountBP: bp})
		b = b[tierSize:]
	}
	return tiers
}

func encodeTiers(tiers []pricing.Tier) []byte {
	var b []byte
	for _, t := range tiers {
		b = append(b, 0)
		b = binary.BigEndian.AppendUint64(b, uint64(t.ThresholdMinor))
		b = binary.BigEndian.AppendUint16(b, uint16(t.DiscountBP+1))
	}
	return b
}

func decodeAmounts(b []byte) []int64 {
	var amounts []int64
	for len(b) >= amountSize && len(amounts) < fuzzMaxAmounts {
		var v uint64
		for _, c := range b[:amountSize] {
			v = v<<8 | uint64(c)
		}
		amounts = append(amounts, int64(v%(pricing.MaxAmount+2)))
		b = b[amountSize:]
	}
	return amounts
}

func encodeAmounts(amounts []int64) []byte {
	var b []byte
	for _, a := range amounts {
		var buf [8]byte
		binary.BigEndian.PutUint64(buf[:], uint64(a))
		b = append(b, buf[8-amountSize:]...)
	}
	return b
}

// addVectorSeeds seeds a fuzz target with every golden-vector contract's
// tiers and its first few records.
func addVectorSeeds(f *testing.F, add func(tiers []byte, amounts []int64)) {
	v := loadVectors(f)
	for _, id := range v.contracts() {
		var amounts []int64
		for _, rec := range v.records[id][:min(16, len(v.records[id]))] {
			amounts = append(amounts, rec.amount)
		}
		add(encodeTiers(v.tiers[id]), amounts)
	}
}

func FuzzPrice(f *testing.F) {
	addVectorSeeds(f, func(tiers []byte, amounts []int64) {
		f.Add(tiers, encodeAmounts(amounts), int64(0))
	})
	worked := encodeTiers([]pricing.Tier{{0, 0}, {10000, 500}, {50000, 1000}})
	f.Add(worked, encodeAmounts([]int64{6000, 6000, 40000, 1}), int64(0))
	f.Add(worked, encodeAmounts([]int64{pricing.MaxAmount, 5}), int64(math.MaxInt64-pricing.MaxAmount-3))
	f.Add(encodeTiers([]pricing.Tier{{0, 5000}, {1, 0}}), encodeAmounts([]int64{1, 1, 1}), int64(0))
	f.Add(encodeTiers([]pricing.Tier{{0, 5000}}), encodeAmounts([]int64{0, 1, pricing.MaxAmount + 1, 1}), int64(-1))

	f.Fuzz(func(t *testing.T, tierBytes, amountBytes []byte, start int64) {
		tiers := decodeTiers(tierBytes)
		s, err := pricing.NewSchedule(tiers)
		ref, refErr := newRefSchedule(tiers)
		if (err == nil) != (refErr == nil) {
			t.Fatalf("NewSchedule(%v): %v; reference: %v", tiers, err, refErr)
		}
		if err != nil {
			if !errors.Is(err, pricing.ErrInvalidTiers) {
				t.Fatalf("NewSchedule(%v): %v, want ErrInvalidTiers", tiers, err)
			}
			return
		}
		if start < 0 {
			// Rejected; then read as a distance below 2^63, so that
			// small fuzz values reach the top of the range.
			if _, err := s.Resume(start); !errors.Is(err, pricing.ErrNegativeGross) {
				t.Fatalf("Resume(%d): %v, want ErrNegativeGross", start, err)
			}
			start = math.MaxInt64 + start + 1
		}
		c, err := s.Resume(start)
		if err != nil {
			t.Fatalf("Resume(%d): %v", start, err)
		}
		if want := ref.roundedInt64(start); c.CumNet() != want {
			t.Fatalf("Resume(%d).CumNet() = %d, reference %d", start, c.CumNet(), want)
		}
		var sum int64
		for _, a := range decodeAmounts(amountBytes) {
			g0, n0 := c.CumGross(), c.CumNet()
			line, err := c.Next(a)
			single, singleErr := s.Price(g0, a)
			switch {
			case a < pricing.MinAmount || a > pricing.MaxAmount:
				if !errors.Is(err, pricing.ErrInvalidAmount) || !errors.Is(singleErr, pricing.ErrInvalidAmount) {
					t.Fatalf("amount %d: Next: %v, Price: %v; want ErrInvalidAmount", a, err, singleErr)
				}
			case refOverflows(g0, a):
				if !errors.Is(err, pricing.ErrOverflow) || !errors.Is(singleErr, pricing.ErrOverflow) {
					t.Fatalf("%d + %d: Next: %v, Price: %v; want ErrOverflow", g0, a, err, singleErr)
				}
			default:
				if err != nil || singleErr != nil {
					t.Fatalf("Next(%d) at %d: %v; Price: %v", a, g0, err, singleErr)
				}
				if want := ref.price(g0, a); line != want || single != want {
					t.Fatalf("tiers %v: amount %d at %d: Next %+v, Price %+v, reference %+v", tiers, a, g0, line, single, want)
				}
				if line.Net < 0 || line.Discount < -1 {
					t.Fatalf("amount %d at %d: line %+v out of bounds", a, g0, line)
				}
				sum += line.Net
				continue
			}
			if c.CumGross() != g0 || c.CumNet() != n0 {
				t.Fatalf("cursor moved on error: (%d, %d) -> (%d, %d)", g0, n0, c.CumGross(), c.CumNet())
			}
		}
		if want := ref.roundedInt64(c.CumGross()); c.CumNet() != want || sum != want-ref.roundedInt64(start) {
			t.Fatalf("end at %d: CumNet %d, Σ net %d; reference R %d", c.CumGross(), c.CumNet(), sum, want)
		}
	})
}

func FuzzExactNet(f *testing.F) {
	addVectorSeeds(f, func(tiers []byte, amounts []int64) {
		var g int64
		for _, a := range amounts {
			g += a
		}
		f.Add(tiers, g)
	})
	f.Add(encodeTiers([]pricing.Tier{{10000, 500}, {50000, 1000}}), int64(52001))
	f.Add(encodeTiers([]pricing.Tier{{0, 1}, {math.MaxInt64, 10000}}), int64(math.MaxInt64))
	f.Add(encodeTiers([]pricing.Tier{{0, 5000}}), int64(-1))

	f.Fuzz(func(t *testing.T, tierBytes []byte, g int64) {
		tiers := decodeTiers(tierBytes)
		s, err := pricing.NewSchedule(tiers)
		ref, refErr := newRefSchedule(tiers)
		if (err == nil) != (refErr == nil) {
			t.Fatalf("NewSchedule(%v): %v; reference: %v", tiers, err, refErr)
		}
		if err != nil {
			return
		}
		exact, exactErr := s.ExactNet(g)
		rounded, roundedErr := s.Rounded(g)
		if g < 0 {
			if !errors.Is(exactErr, pricing.ErrNegativeGross) || !errors.Is(roundedErr, pricing.ErrNegativeGross) {
				t.Fatalf("g=%d: ExactNet: %v, Rounded: %v; want ErrNegativeGross", g, exactErr, roundedErr)
			}
			return
		}
		if exactErr != nil || roundedErr != nil {
			t.Fatalf("g=%d: ExactNet: %v, Rounded: %v", g, exactErr, roundedErr)
		}
		if want := ref.exactNet(g); exact != want {
			t.Fatalf("tiers %v: ExactNet(%d) = %q, reference %q", tiers, g, exact, want)
		}
		if want := ref.roundedInt64(g); rounded != want {
			t.Fatalf("tiers %v: Rounded(%d) = %d, reference %d", tiers, g, rounded, want)
		}
		if rounded < 0 || rounded > g {
			t.Fatalf("Rounded(%d) = %d outside 0..g", g, rounded)
		}
	})
}
