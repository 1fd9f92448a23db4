package pricing

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
)

// Limits of the pricing rules.
const (
	// MaxTiers is the largest number of tiers a contract may define.
	MaxTiers = 64
	// MaxDiscountBP is the largest discount rate, in basis points (100%).
	MaxDiscountBP = 10000
	// MinAmount and MaxAmount bound the gross amount of one record, in
	// minor units.
	MinAmount = 1
	MaxAmount = 1_000_000_000_000
)

// bpScale is the number of basis points in a whole (10000 bp = 100%).
const bpScale = 10000

// lastEnd marks the upper end of the last band: it is larger than every
// int64 cumulative gross, so no gross ever reaches it.
const lastEnd = uint64(1) << 63

// Sentinel errors. Returned errors wrap them with detail; test with
// errors.Is.
var (
	// ErrOverflow reports that a cumulative gross would exceed
	// math.MaxInt64 minor units.
	ErrOverflow = errors.New("pricing: cumulative gross overflows int64")
	// ErrInvalidTiers reports a tier schedule that breaks the rules.
	ErrInvalidTiers = errors.New("pricing: invalid tier schedule")
	// ErrInvalidAmount reports a record amount outside MinAmount..MaxAmount.
	ErrInvalidAmount = errors.New("pricing: invalid amount")
	// ErrNegativeGross reports a negative cumulative gross.
	ErrNegativeGross = errors.New("pricing: negative cumulative gross")
)

// errZeroCursor is returned by a Cursor that was not made by Resume.
var errZeroCursor = errors.New("pricing: zero Cursor; obtain one from Schedule.Resume")

// Tier is one row of a contract's discount schedule: from ThresholdMinor
// (inclusive) up to the next tier's threshold, gross is discounted by
// DiscountBP basis points.
type Tier struct {
	ThresholdMinor int64
	DiscountBP     int64
}

// band is a tier prepared for pricing.
type band struct {
	start  int64  // threshold, inclusive
	end    uint64 // next band's threshold, or lastEnd for the last band
	factor uint64 // 10000 - discount_bp: what each minor unit adds to N
	nHi    uint64 // N(start) = 10000*start - D(start), high 64 bits
	nLo    uint64 // N(start), low 64 bits
}

// Schedule is a validated tier schedule. It is immutable and safe for
// concurrent use. Make one with NewSchedule.
type Schedule struct {
	tiers []Tier // sorted, as given
	bands []band // sorted, with the implicit zero tier when needed
}

// NewSchedule validates tiers and prepares them for pricing. tiers may be
// in any order; the slice is copied, not retained. It must hold 1 to
// MaxTiers tiers with distinct thresholds >= 0 and discounts in
// 0..MaxDiscountBP. If no tier starts at 0, gross below the lowest
// threshold is not discounted.
func NewSchedule(tiers []Tier) (*Schedule, error) {
	if len(tiers) == 0 {
		return nil, fmt.Errorf("%w: no tiers", ErrInvalidTiers)
	}
	if len(tiers) > MaxTiers {
		return nil, fmt.Errorf("%w: %d tiers, at most %d allowed", ErrInvalidTiers, len(tiers), MaxTiers)
	}
	for i, t := range tiers {
		if t.ThresholdMinor < 0 {
			return nil, fmt.Errorf("%w: tiers[%d] (threshold_minor=%d, discount_bp=%d): threshold_minor is negative",
				ErrInvalidTiers, i, t.ThresholdMinor, t.DiscountBP)
		}
		if t.DiscountBP < 0 || t.DiscountBP > MaxDiscountBP {
			return nil, fmt.Errorf("%w: tiers[%d] (threshold_minor=%d, discount_bp=%d): discount_bp outside 0..%d",
				ErrInvalidTiers, i, t.ThresholdMinor, t.DiscountBP, MaxDiscountBP)
		}
	}

	// Sort positions rather than tiers so a duplicate can be reported by
	// its place in the caller's slice.
	order := make([]int, len(tiers))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(tiers[a].ThresholdMinor, tiers[b].ThresholdMinor)
	})
	sorted := make([]Tier, len(tiers))
	for k, i := range order {
		sorted[k] = tiers[i]
		if k > 0 && sorted[k-1].ThresholdMinor == tiers[i].ThresholdMinor {
			return nil, fmt.Errorf("%w: tiers[%d] and tiers[%d] share threshold_minor=%d",
				ErrInvalidTiers, order[k-1], i, tiers[i].ThresholdMinor)
		}
	}

	all := sorted
	if sorted[0].ThresholdMinor != 0 {
		all = append([]Tier{{ThresholdMinor: 0, DiscountBP: 0}}, sorted...)
	}
	bands := make([]band, len(all))
	var nHi, nLo uint64 // N(0) = 0
	for i, t := range all {
		b := band{
			start:  t.ThresholdMinor,
			end:    lastEnd,
			factor: uint64(bpScale - t.DiscountBP),
			nHi:    nHi,
			nLo:    nLo,
		}
		if i+1 < len(all) {
			next := all[i+1].ThresholdMinor
			b.end = uint64(next)
			// N(next) = N(start) + factor*(next-start); stays below 2^77.
			hi, lo := bits.Mul64(b.factor, uint64(next-b.start))
			var carry uint64
			nLo, carry = bits.Add64(nLo, lo, 0)
			nHi, _ = bits.Add64(nHi, hi, carry)
		}
		bands[i] = b
	}
	return &Schedule{tiers: sorted, bands: bands}, nil
}

// Tiers returns the schedule's tiers sorted by threshold, as given to
// NewSchedule (without the implicit zero tier). The result is a copy.
func (s *Schedule) Tiers() []Tier {
	return slices.Clone(s.tiers)
}

// bandOf returns the index of the band holding cumulative gross g >= 0.
func (s *Schedule) bandOf(g int64) int {
	// First band whose start exceeds g, minus one. bands[0].start is 0.
	i, _ := slices.BinarySearchFunc(s.bands, g, func(b band, g int64) int {
		if b.start <= g {
			return -1
		}
		return 1
	})
	return i - 1
}

// exact returns N(g) = 10000*g - D(g) split as q*10000 + rem, rem < 10000,
// together with the index of g's band. g must be >= 0.
func (s *Schedule) exact(g int64) (q, rem uint64, idx int) {
	idx = s.bandOf(g)
	b := &s.bands[idx]
	hi, lo := bits.Mul64(b.factor, uint64(g-b.start))
	var carry uint64
	lo, carry = bits.Add64(lo, b.nLo, 0)
	hi, _ = bits.Add64(hi, b.nHi, carry)
	// N(g) <= 10000*g < 10000*2^63, so hi < 5000 < 10000 and Div64
	// cannot overflow.
	q, rem = bits.Div64(hi, lo, bpScale)
	return q, rem, idx
}

// roundHalfEven rounds (q*10000 + rem)/10000 to an integer, ties to even.
// The result never exceeds the gross it was computed from, so it fits in
// an int64.
func roundHalfEven(q, rem uint64) int64 {
	if rem > bpScale/2 || (rem == bpScale/2 && q&1 == 1) {
		q++
	}
	return int64(q)
}

// checkGross rejects a negative cumulative gross given to method op.
func checkGross(op string, g int64) error {
	if g < 0 {
		return fmt.Errorf("%w: %s(%d)", ErrNegativeGross, op, g)
	}
	return nil
}

// Rounded returns R(g): the net of cumulative gross g rounded half to even
// to whole minor units.
func (s *Schedule) Rounded(g int64) (int64, error) {
	if err := checkGross("Rounded", g); err != nil {
		return 0, err
	}
	q, rem, _ := s.exact(g)
	return roundHalfEven(q, rem), nil
}

// ExactNet returns the exact net of cumulative gross g as a decimal string
// with exactly four fractional digits, such as "49800.9000". Nets are
// always multiples of 1/10000 of a minor unit, so this is exact.
func (s *Schedule) ExactNet(g int64) (string, error) {
	if err := checkGross("ExactNet", g); err != nil {
		return "", err
	}
	q, rem, _ := s.exact(g)
	buf := make([]byte, 0, 25)
	buf = strconv.AppendUint(buf, q, 10)
	buf = append(buf, '.',
		byte('0'+rem/1000), byte('0'+rem/100%10), byte('0'+rem/10%10), byte('0'+rem%10))
	return string(buf), nil
}

// Line is the priced result of one record, in minor units. Gross is the
// record's amount and Discount = Gross - Net.
type Line struct {
	Gross    int64
	Discount int64
	Net      int64
}

// Price prices one record of amount minor units for a contract whose
// records so far sum to g0. It is equivalent to Resume(g0) followed by
// one Next(amount); prefer a Cursor for a run of records.
func (s *Schedule) Price(g0, amount int64) (Line, error) {
	if err := checkGross("Price", g0); err != nil {
		return Line{}, err
	}
	p := s.at(g0)
	return s.step(&p, amount)
}

// position is a cursor's cumulative state.
type position struct {
	g       int64  // cumulative gross G
	idx     int    // band holding G
	q       uint64 // floor(N(G) / 10000)
	rem     uint64 // N(G) mod 10000
	rounded int64  // R(G)
}

// Cursor prices a contract's records in order, carrying the cumulative
// state between records so that pricing can stop and later resume from a
// checkpoint (the cumulative gross). A Cursor is not safe for concurrent
// use; its Schedule is.
type Cursor struct {
	s   *Schedule
	pos position
}

// at returns the position for cumulative gross g >= 0.
func (s *Schedule) at(g int64) position {
	q, rem, idx := s.exact(g)
	return position{g: g, idx: idx, q: q, rem: rem, rounded: roundHalfEven(q, rem)}
}

// Resume returns a Cursor positioned after records whose amounts sum to
// cumGross: 0 for a contract with no priced records yet.
func (s *Schedule) Resume(cumGross int64) (*Cursor, error) {
	if err := checkGross("Resume", cumGross); err != nil {
		return nil, err
	}
	return &Cursor{s: s, pos: s.at(cumGross)}, nil
}

// Next prices the next record of amount minor units and advances the
// cursor past it. On error the cursor is unchanged.
func (c *Cursor) Next(amount int64) (Line, error) {
	if c.s == nil {
		return Line{}, errZeroCursor
	}
	return c.s.step(&c.pos, amount)
}

// step prices a record of amount minor units at position p and moves p
// past it. On error p is unchanged.
func (s *Schedule) step(p *position, amount int64) (Line, error) {
	if amount < MinAmount || amount > MaxAmount {
		return Line{}, invalidAmount(amount)
	}
	g0 := p.g
	if g0 > math.MaxInt64-amount {
		return Line{}, overflow(g0, amount)
	}
	g1 := g0 + amount

	// The increase of N over [g0, g1] is at most 10000*amount <= 1e16,
	// so it and the carried remainder fit comfortably in a uint64.
	bands := s.bands
	idx := p.idx
	var delta uint64
	if uint64(g1) < bands[idx].end {
		delta = bands[idx].factor * uint64(amount)
	} else {
		from := g0
		for uint64(g1) >= bands[idx].end {
			end := int64(bands[idx].end)
			delta += bands[idx].factor * uint64(end-from)
			from = end
			idx++
		}
		delta += bands[idx].factor * uint64(g1-from)
	}
	sum := p.rem + delta
	q := p.q + sum/bpScale
	rem := sum % bpScale
	rounded := roundHalfEven(q, rem)
	net := rounded - p.rounded

	*p = position{g: g1, idx: idx, q: q, rem: rem, rounded: rounded}
	return Line{Gross: amount, Discount: amount - net, Net: net}, nil
}

// invalidAmount and overflow build step's errors out of its fast path.
func invalidAmount(amount int64) error {
	return fmt.Errorf("%w: %d not in %d..%d", ErrInvalidAmount, amount, MinAmount, MaxAmount)
}

func overflow(g0, amount int64) error {
	return fmt.Errorf("%w: cumulative gross %d + amount %d exceeds %d",
		ErrOverflow, g0, amount, int64(math.MaxInt64))
}

// CumGross returns the cumulative gross G priced so far, including the
// checkpoint the cursor resumed from.
func (c *Cursor) CumGross() int64 { return c.pos.g }

// CumNet returns R(G), the rounded net at the cursor's position. The Net
// of the lines a cursor returns sums to CumNet() minus the CumNet() it
// started with.
func (c *Cursor) CumNet() int64 { return c.pos.rounded }
