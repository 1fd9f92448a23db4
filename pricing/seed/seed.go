// Package seed generates deterministic synthetic pricing data: contracts
// with varied tier schedules and records with many tiny amounts and some
// large ones, as CSV in the load format. The same options always produce
// the same bytes.
//
// Options.Shape says how the records are spread over the contracts:
// evenly (Uniform, the default), by a Zipf law (contract i gets a share
// proportional to 1/(i+1)^s), or with one hot contract holding a given
// fraction of them. Whatever the shape, the records number exactly
// Contracts × RecordsPerContract, and the records of different contracts
// are interleaved: the first record of every contract that has one, then
// the second of every contract that has two, and so on.
package seed

import (
	"bufio"
	"container/heap"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
)

// Options choose what to generate.
type Options struct {
	Contracts int // number of contracts
	// RecordsPerContract is the records of every contract under the
	// uniform shape, and their mean under the others: the records number
	// Contracts × RecordsPerContract whatever the shape.
	RecordsPerContract int
	Seed               uint64 // random seed
	Prefix             string // contract id prefix; defaults to "c"
	// Shape spreads the records over the contracts; the zero value is
	// Uniform.
	Shape Shape
}

// ShapeKind names a way of spreading records over contracts.
type ShapeKind int

const (
	// Uniform gives every contract RecordsPerContract records.
	Uniform ShapeKind = iota
	// Zipf gives contract i a share proportional to 1/(i+1)^s, s being
	// Shape.Param (> 0): contract 0 is the largest.
	Zipf
	// Hot gives contract 0 the fraction Shape.Param (0 < f < 1) of the
	// records and spreads the rest evenly over the others.
	Hot
)

// Shape is how records are spread over contracts. Its text form, which
// ParseShape reads and String writes, is "uniform", "zipf:S" or "hot:F".
// The zero value is Uniform.
type Shape struct {
	Kind ShapeKind
	// Param is the Zipf exponent s or the hot contract's fraction of
	// the records; unused for Uniform.
	Param float64
}

// ParseShape reads a shape's text form: "uniform", "zipf:S" with S > 0
// (say zipf:1.1), or "hot:F" with 0 < F < 1 (say hot:0.5).
func ParseShape(text string) (Shape, error) {
	kind, param, hasParam := strings.Cut(strings.TrimSpace(text), ":")
	var s Shape
	switch kind {
	case "uniform":
		if hasParam {
			return s, fmt.Errorf("shape %q: uniform takes no parameter", text)
		}
		return s, nil
	case "zipf":
		s.Kind = Zipf
	case "hot":
		s.Kind = Hot
	default:
		return s, fmt.Errorf("shape %q: want uniform, zipf:S (say zipf:1.1) or hot:F (say hot:0.5)", text)
	}
	if !hasParam {
		return s, fmt.Errorf("shape %q: want %s:%s", text, kind, map[ShapeKind]string{Zipf: "S, an exponent above 0 (say zipf:1.1)", Hot: "F, a fraction between 0 and 1 (say hot:0.5)"}[s.Kind])
	}
	p, err := strconv.ParseFloat(param, 64)
	if err != nil {
		return s, fmt.Errorf("shape %q: %q is not a number", text, param)
	}
	s.Param = p
	if why := s.problem(); why != "" {
		return Shape{}, fmt.Errorf("shape %q: %s", text, why)
	}
	return s, nil
}

// Validate reports whether the shape can be generated.
func (s Shape) Validate() error {
	if why := s.problem(); why != "" {
		return fmt.Errorf("shape %s: %s", s, why)
	}
	return nil
}

// problem says what is wrong with s, or "".
func (s Shape) problem() string {
	switch s.Kind {
	case Uniform:
	case Zipf:
		if !(s.Param > 0) || math.IsInf(s.Param, 0) {
			return "the Zipf exponent must be a number above 0"
		}
	case Hot:
		if !(s.Param > 0 && s.Param < 1) {
			return "the hot contract's fraction must lie strictly between 0 and 1"
		}
	default:
		return fmt.Sprintf("unknown shape kind %d", int(s.Kind))
	}
	return ""
}

// String is the shape's text form, as ParseShape reads it.
func (s Shape) String() string {
	p := strconv.FormatFloat(s.Param, 'g', -1, 64)
	switch s.Kind {
	case Uniform:
		return "uniform"
	case Zipf:
		return "zipf:" + p
	case Hot:
		return "hot:" + p
	}
	return fmt.Sprintf("shape(%d):%s", int(s.Kind), p)
}

// Set parses text into s, so that a *Shape is a command-line flag.
func (s *Shape) Set(text string) error {
	v, err := ParseShape(text)
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// Type names the flag's value in usage messages.
func (s *Shape) Type() string { return "shape" }

func (o Options) rng(stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(o.Seed, stream))
}

// ContractID returns the id of contract i.
func (o Options) ContractID(i int) string {
	p := o.Prefix
	if p == "" {
		p = "c"
	}
	return fmt.Sprintf("%s-%06d", p, i)
}

// Records is the number of records generated: Contracts ×
// RecordsPerContract, whatever the shape.
func (o Options) Records() int64 {
	return int64(max(0, o.Contracts)) * int64(max(0, o.RecordsPerContract))
}

// Sizes returns the number of records of each contract, by contract
// index: they sum to Records exactly and, when there are records at all,
// every contract has at least one. Zipf shares are rounded by largest
// remainder (ties to the lower index), then contracts rounded to none get
// one record each from the largest. It takes memory for the contracts,
// not the records.
func (o Options) Sizes() ([]int64, error) {
	if o.Contracts < 0 || o.RecordsPerContract < 0 {
		return nil, fmt.Errorf("contracts (%d) and records per contract (%d) must not be negative", o.Contracts, o.RecordsPerContract)
	}
	if err := o.Shape.Validate(); err != nil {
		return nil, err
	}
	c, n := o.Contracts, o.Records()
	sizes := make([]int64, c)
	switch {
	case c == 0:
	case o.Shape.Kind == Uniform || n == 0 || c == 1:
		for i := range sizes {
			sizes[i] = n / int64(c)
		}
	case o.Shape.Kind == Hot:
		rest := int64(c - 1)
		hot := min(max(1, int64(math.Round(o.Shape.Param*float64(n)))), n-rest)
		sizes[0] = hot
		for i := 1; i < c; i++ {
			sizes[i] = (n - hot) / rest
			if int64(i) <= (n-hot)%rest {
				sizes[i]++
			}
		}
	case o.Shape.Kind == Zipf:
		zipfSizes(sizes, n, o.Shape.Param)
	}
	return sizes, nil
}

// zipfSizes fills sizes (len > 1) with n records by shares proportional
// to 1/(i+1)^s, non-increasing in i, each at least 1 (n ≥ len(sizes)).
func zipfSizes(sizes []int64, n int64, s float64) {
	c := len(sizes)
	w := make([]float64, c)
	var total float64
	for i := range w {
		w[i] = math.Pow(float64(i+1), -s)
		total += w[i]
	}
	frac := make([]float64, c)
	var sum int64
	for i := range w {
		q := float64(n) * (w[i] / total)
		f := math.Floor(q)
		sizes[i], frac[i] = int64(f), q-f
		sum += sizes[i]
	}
	// Largest remainders first; equal remainders to the lower index, so
	// that sizes stay non-increasing.
	order := make([]int, c)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return frac[order[a]] > frac[order[b]] })
	for k := 0; sum < n; k = (k + 1) % c {
		sizes[order[k]]++
		sum++
	}
	// Every contract gets at least one record (zeros are a suffix, since
	// sizes are non-increasing); the records this adds, and any that
	// floating-point error added above, are taken back one at a time from
	// the largest contract. While sum > n ≥ c some contract has 2 or more,
	// so none drops to 0.
	for i := c - 1; i >= 0 && sizes[i] == 0; i-- {
		sizes[i] = 1
		sum++
	}
	h := &largest{sizes: sizes, idx: make([]int, c)}
	for i := range h.idx {
		h.idx[i] = i
	}
	heap.Init(h)
	for ; sum > n; sum-- {
		sizes[h.idx[0]]--
		heap.Fix(h, 0)
	}
}

// largest is a max-heap of contract indices by size; among equal sizes
// the highest index comes first, so taking from it keeps sizes
// non-increasing by index.
type largest struct {
	sizes []int64
	idx   []int
}

func (h *largest) Len() int { return len(h.idx) }
func (h *largest) Less(a, b int) bool {
	sa, sb := h.sizes[h.idx[a]], h.sizes[h.idx[b]]
	if sa != sb {
		return sa > sb
	}
	return h.idx[a] > h.idx[b]
}
func (h *largest) Swap(a, b int) { h.idx[a], h.idx[b] = h.idx[b], h.idx[a] }
func (h *largest) Push(x any)    { h.idx = append(h.idx, x.(int)) }
func (h *largest) Pop() any {
	x := h.idx[len(h.idx)-1]
	h.idx = h.idx[:len(h.idx)-1]
	return x
}

// WriteTiers writes the tiers CSV.
func WriteTiers(w io.Writer, o Options) error {
	bw := bufio.NewWriter(w)
	bw.WriteString("contract_id,threshold_minor,discount_bp\n")
	r := o.rng(1)
	for i := 0; i < o.Contracts; i++ {
		id := o.ContractID(i)
		n := 1 + r.IntN(6)
		threshold := int64(0)
		if r.IntN(4) == 0 {
			threshold = int64(1 + r.IntN(50_000)) // implicit zero tier below
		}
		bp := int64(0)
		for t := 0; t < n; t++ {
			bp = min(10000, bp+int64(r.IntN(1500)))
			fmt.Fprintf(bw, "%s,%d,%d\n", id, threshold, bp)
			threshold += int64(1 + r.IntN(2_000_000))
		}
	}
	return bw.Flush()
}

// WriteRecords writes the records CSV, contracts interleaved: round j
// writes record j of every contract that has more than j records, in
// contract order. It streams: memory grows with the contracts, not the
// records.
func WriteRecords(w io.Writer, o Options, progress func(rows int64)) error {
	sizes, err := o.Sizes()
	if err != nil {
		return err
	}
	active := make([]int, 0, len(sizes))
	for i, n := range sizes {
		if n > 0 {
			active = append(active, i)
		}
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	bw.WriteString("contract_id,record_id,amount_minor\n")
	r := o.rng(2)
	var buf []byte
	var rows int64
	for j := int64(0); len(active) > 0; j++ {
		for _, i := range active {
			var amount int64
			switch k := r.IntN(100); {
			case k < 60:
				amount = 1 + r.Int64N(100) // many tiny amounts
			case k < 97:
				amount = 100 + r.Int64N(100_000)
			default:
				amount = 1_000_000 + r.Int64N(10_000_000_000) // some large
			}
			buf = buf[:0]
			buf = append(buf, o.ContractID(i)...)
			buf = append(buf, ',')
			buf = append(buf, 'r')
			buf = strconv.AppendInt(buf, j, 10)
			buf = append(buf, ',')
			buf = strconv.AppendInt(buf, amount, 10)
			buf = append(buf, '\n')
			if _, err := bw.Write(buf); err != nil {
				return err
			}
			rows++
			if progress != nil && rows%100_000 == 0 {
				progress(rows)
			}
		}
		// Drop the contracts whose last record this round wrote.
		keep := active[:0]
		for _, i := range active {
			if sizes[i] > j+1 {
				keep = append(keep, i)
			}
		}
		active = keep
	}
	return bw.Flush()
}
