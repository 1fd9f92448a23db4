// Package seed generates deterministic synthetic pricing data: contracts
// with varied tier schedules and records with many tiny amounts and some
// large ones, as CSV in the load format. The same options always produce
// the same bytes.
package seed

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
)

// Options choose what to generate.
type Options struct {
	Contracts          int    // number of contracts
	RecordsPerContract int    // records per contract
	Seed               uint64 // random seed
	Prefix             string // contract id prefix; defaults to "c"
}

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

// WriteRecords writes the records CSV, contracts interleaved.
func WriteRecords(w io.Writer, o Options, progress func(rows int64)) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	bw.WriteString("contract_id,record_id,amount_minor\n")
	r := o.rng(2)
	var buf []byte
	var rows int64
	for j := 0; j < o.RecordsPerContract; j++ {
		for i := 0; i < o.Contracts; i++ {
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
			buf = strconv.AppendInt(buf, int64(j), 10)
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
	}
	return bw.Flush()
}
