package pricing_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/pricing"
)

// propertySeed is the fixed seed of TestBatchingProperty; every run also
// tries a seed of its own (testutil.Seed: BATON_SEED replays one).
const propertySeed uint64 = 0x6261746f6e

func TestBatchingProperty(t *testing.T) {
	t.Parallel()
	seeds := []uint64{propertySeed, uint64(testutil.Seed(t))}
	trials := 400
	if testing.Short() {
		trials = 50
	}
	for _, seed := range seeds {
		t.Run("seed="+strconv.FormatUint(seed, 10), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
			for trial := range trials {
				checkTrial(t, r, trial)
				if t.Failed() {
					t.Fatalf("seed %d: failed at trial %d", seed, trial)
				}
			}
		})
	}
}

// randomStart picks where a contract's pricing begins.
func randomStart(r *rand.Rand) int64 {
	switch r.IntN(6) {
	case 0, 1:
		return 0
	case 2:
		return r.Int64N(1_000_000)
	case 3:
		return 1_000_000_000_000_000 + r.Int64N(1_000_000_000_000_000) // past 1e15
	case 4:
		return 1<<62 - r.Int64N(50_000_000_000_000)
	default:
		return math.MaxInt64 - r.Int64N(50_000_000_000_000)
	}
}

// randomThreshold picks a threshold, often close to start so that the
// records cross it.
func randomThreshold(r *rand.Rand, start int64) int64 {
	switch r.IntN(8) {
	case 0:
		return r.Int64N(100)
	case 1:
		return r.Int64N(10_000_000)
	case 2:
		return r.Int64N(10_000_000_000_000_000)
	case 3:
		return 1<<62 + r.Int64N(1<<40) - 1<<39 // near 2^62
	case 4:
		return math.MaxInt64 - r.Int64N(10_000_000_000_000)
	case 5:
		return math.MaxInt64
	default:
		off := r.Int64N(20_000_000_000_000)
		if start > math.MaxInt64-off {
			return math.MaxInt64 - r.Int64N(1000)
		}
		return start + off
	}
}

func randomBP(r *rand.Rand) int64 {
	switch r.IntN(6) {
	case 0:
		return 0
	case 1:
		return 10000
	case 2:
		return 5000
	case 3:
		return 1 + r.Int64N(10)
	default:
		return r.Int64N(10001)
	}
}

func randomTiers(r *rand.Rand, start int64) []pricing.Tier {
	n := 1 + r.IntN(4)
	if r.IntN(3) == 0 {
		n = 1 + r.IntN(pricing.MaxTiers)
	}
	seen := map[int64]bool{}
	var tiers []pricing.Tier
	if r.IntN(2) == 0 { // otherwise the zero tier may be implicit
		seen[0] = true
		tiers = append(tiers, pricing.Tier{ThresholdMinor: 0, DiscountBP: randomBP(r)})
	}
	for len(tiers) < n {
		th := randomThreshold(r, start)
		if seen[th] {
			continue
		}
		seen[th] = true
		tiers = append(tiers, pricing.Tier{ThresholdMinor: th, DiscountBP: randomBP(r)})
	}
	r.Shuffle(len(tiers), func(i, j int) { tiers[i], tiers[j] = tiers[j], tiers[i] })
	return tiers
}

func randomAmount(r *rand.Rand) int64 {
	switch r.IntN(5) {
	case 0:
		return 1
	case 1:
		return 1 + r.Int64N(100)
	case 2:
		return pricing.MaxAmount
	default:
		return 1 + r.Int64N(pricing.MaxAmount)
	}
}

// nonDecreasing reports whether discount rates never fall as gross grows
// (counting the implicit zero tier).
func nonDecreasing(ref *refSchedule) bool {
	for i := 1; i < len(ref.bps); i++ {
		if ref.bps[i] < ref.bps[i-1] {
			return false
		}
	}
	return true
}

type pricedRecord struct {
	g0     int64
	amount int64
	line   pricing.Line
}

func checkTrial(t *testing.T, r *rand.Rand, trial int) {
	t.Helper()
	start := randomStart(r)
	tiers := randomTiers(r, start)
	amounts := make([]int64, 1+r.IntN(120))
	for i := range amounts {
		amounts[i] = randomAmount(r)
	}
	s, err := pricing.NewSchedule(tiers)
	if err != nil {
		t.Fatalf("trial %d: NewSchedule(%v): %v", trial, tiers, err)
	}
	ref, err := newRefSchedule(tiers)
	if err != nil {
		t.Fatal(err)
	}
	rising := nonDecreasing(ref)

	// One pass.
	c := mustResume(t, s, start)
	var priced []pricedRecord
	for _, a := range amounts {
		g0, n0 := c.CumGross(), c.CumNet()
		line, err := c.Next(a)
		if refOverflows(g0, a) {
			if !errors.Is(err, pricing.ErrOverflow) {
				t.Errorf("trial %d: Next(%d) at %d: %v, want ErrOverflow", trial, a, g0, err)
			}
			if c.CumGross() != g0 || c.CumNet() != n0 {
				t.Errorf("trial %d: cursor moved on overflow", trial)
			}
			break
		}
		if err != nil {
			t.Fatalf("trial %d: Next(%d) at %d: %v", trial, a, g0, err)
		}
		if want := ref.price(g0, a); line != want {
			t.Errorf("trial %d tiers %v: Next(%d) at %d = %+v, reference %+v", trial, tiers, a, g0, line, want)
		}
		if single, err := s.Price(g0, a); err != nil || single != line {
			t.Errorf("trial %d: Price(%d, %d) = %+v, %v; cursor %+v", trial, g0, a, single, err, line)
		}
		if line.Gross != a || line.Net < 0 || line.Discount+line.Net != line.Gross {
			t.Errorf("trial %d: bad line %+v for amount %d", trial, line, a)
		}
		// Half-even rounding can make a record's net exceed its gross by
		// one minor unit, but only where the rate has fallen.
		if line.Discount < -1 || (rising && line.Discount < 0) {
			t.Errorf("trial %d tiers %v: Next(%d) at %d: discount %d", trial, tiers, a, g0, line.Discount)
		}
		priced = append(priced, pricedRecord{g0: g0, amount: a, line: line})
	}
	if t.Failed() {
		return
	}

	// Σ nets == R(G_total) - R(start).
	var sum int64
	for _, p := range priced {
		sum += p.line.Net
	}
	rStart, err := s.Rounded(start)
	if err != nil {
		t.Fatal(err)
	}
	rEnd, err := s.Rounded(c.CumGross())
	if err != nil {
		t.Fatal(err)
	}
	if sum != rEnd-rStart || c.CumNet() != rEnd || rEnd != ref.roundedInt64(c.CumGross()) {
		t.Errorf("trial %d: Σ net %d, R(end)-R(start) %d, CumNet %d, reference R(end) %d",
			trial, sum, rEnd-rStart, c.CumNet(), ref.roundedInt64(c.CumGross()))
	}
	if start == 0 && sum != rEnd {
		t.Errorf("trial %d: Σ net %d != Rounded(G_total) %d", trial, sum, rEnd)
	}

	// The same records in random batches, each resumed from the previous
	// batch's checkpoint with a fresh cursor.
	cum := start
	for i := 0; i < len(priced); {
		size := 1 + r.IntN(len(priced)-i)
		if r.IntN(2) == 0 {
			size = 1 + r.IntN(min(4, len(priced)-i))
		}
		bc := mustResume(t, s, cum)
		for _, p := range priced[i : i+size] {
			line, err := bc.Next(p.amount)
			if err != nil || line != p.line {
				t.Fatalf("trial %d: batched Next(%d) at %d = %+v, %v; one pass %+v",
					trial, p.amount, p.g0, line, err, p.line)
			}
		}
		cum = bc.CumGross()
		i += size
	}
	if cum != c.CumGross() {
		t.Errorf("trial %d: batched cumulative gross %d, one pass %d", trial, cum, c.CumGross())
	}
}
