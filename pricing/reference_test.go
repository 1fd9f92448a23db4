package pricing_test

// A slow, deliberately plain implementation of the pricing rules on
// math/big, written straight from the definitions, used to cross-check the
// fast engine in tests and fuzzing. It shares no code with the engine.

import (
	"fmt"
	"math"
	"math/big"
	"sort"

	"github.com/batonhq/baton/pricing"
)

// refSchedule is a tier schedule as the reference sees it: sorted, with
// the implicit (0, 0 bp) tier added when no tier starts at 0.
type refSchedule struct {
	thresholds []int64
	bps        []int64
}

// refValid applies the validation rules independently of the engine.
func refValid(tiers []pricing.Tier) bool {
	if len(tiers) < 1 || len(tiers) > 64 {
		return false
	}
	seen := map[int64]bool{}
	for _, t := range tiers {
		if t.ThresholdMinor < 0 || t.DiscountBP < 0 || t.DiscountBP > 10000 || seen[t.ThresholdMinor] {
			return false
		}
		seen[t.ThresholdMinor] = true
	}
	return true
}

func newRefSchedule(tiers []pricing.Tier) (*refSchedule, error) {
	if !refValid(tiers) {
		return nil, fmt.Errorf("reference: invalid tiers %v", tiers)
	}
	sorted := append([]pricing.Tier(nil), tiers...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].ThresholdMinor < sorted[j].ThresholdMinor })
	r := &refSchedule{}
	if sorted[0].ThresholdMinor != 0 {
		r.thresholds = append(r.thresholds, 0)
		r.bps = append(r.bps, 0)
	}
	for _, t := range sorted {
		r.thresholds = append(r.thresholds, t.ThresholdMinor)
		r.bps = append(r.bps, t.DiscountBP)
	}
	return r, nil
}

// n returns N(G) = 10000*G - D(G), D(G) = Σ bp_i * max(0, min(G, t_{i+1}) - t_i).
func (r *refSchedule) n(g *big.Int) *big.Int {
	d := new(big.Int)
	for i := range r.thresholds {
		lo := big.NewInt(r.thresholds[i])
		hi := new(big.Int).Set(g) // last tier: no upper end
		if i+1 < len(r.thresholds) {
			next := big.NewInt(r.thresholds[i+1])
			if next.Cmp(g) < 0 {
				hi = next
			}
		}
		width := new(big.Int).Sub(hi, lo)
		if width.Sign() <= 0 {
			continue
		}
		d.Add(d, width.Mul(width, big.NewInt(r.bps[i])))
	}
	n := new(big.Int).Mul(g, big.NewInt(10000))
	return n.Sub(n, d)
}

// rounded returns R(G): N(G)/10000 rounded half to even.
func (r *refSchedule) rounded(g *big.Int) *big.Int {
	q, m := new(big.Int).QuoRem(r.n(g), big.NewInt(10000), new(big.Int))
	switch m.Cmp(big.NewInt(5000)) {
	case 1:
		q.Add(q, big.NewInt(1))
	case 0:
		if q.Bit(0) == 1 {
			q.Add(q, big.NewInt(1))
		}
	}
	return q
}

// exactNet formats N(G)/10000 with four fractional digits.
func (r *refSchedule) exactNet(g int64) string {
	q, m := new(big.Int).QuoRem(r.n(big.NewInt(g)), big.NewInt(10000), new(big.Int))
	return fmt.Sprintf("%s.%04d", q.String(), m.Int64())
}

// roundedInt64 returns R(g) for an int64 g.
func (r *refSchedule) roundedInt64(g int64) int64 {
	v := r.rounded(big.NewInt(g))
	if !v.IsInt64() {
		panic(fmt.Sprintf("reference: R(%d) = %s does not fit int64", g, v))
	}
	return v.Int64()
}

// refOverflows reports whether g0 + amount exceeds math.MaxInt64.
func refOverflows(g0, amount int64) bool {
	sum := new(big.Int).Add(big.NewInt(g0), big.NewInt(amount))
	return sum.Cmp(big.NewInt(math.MaxInt64)) > 0
}

// price prices one record of amount after cumulative gross g0, which must
// not overflow.
func (r *refSchedule) price(g0, amount int64) pricing.Line {
	before := r.rounded(big.NewInt(g0))
	after := r.rounded(new(big.Int).Add(big.NewInt(g0), big.NewInt(amount)))
	net := new(big.Int).Sub(after, before)
	discount := new(big.Int).Sub(big.NewInt(amount), net)
	return pricing.Line{Gross: amount, Discount: discount.Int64(), Net: net.Int64()}
}
