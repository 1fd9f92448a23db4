package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/pgxconn"
)

// BenchmarkSegmentCopyOrder copies a batch of priced rows into
// priced_rows the way a segment's batch lands: before keys already
// written (each iteration's contract sorts before the previous one's), in
// seq order, or in the pricer's two passes (five of every nine rows, then
// the rest; pricer.interleaved). It reports the key's bytes per row
// besides the time: the pages PostgreSQL's 50/50 splits of the middle of
// the index leave half full, and the second pass fills.
func BenchmarkSegmentCopyOrder(b *testing.B) {
	const rows = 16_384
	for _, order := range []string{"in-order", "two-pass"} {
		b.Run(order, func(b *testing.B) {
			db := pgtest.NewDB(b)
			ctx := context.Background()
			conn, err := db.Conn(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			idx := make([]int, 0, rows)
			for pass := range 2 {
				for i := range rows {
					if order == "in-order" && pass == 0 || order == "two-pass" && i%9%2 == pass {
						idx = append(idx, i)
					}
				}
			}
			copyContract := func(c string) error {
				return pgxconn.Raw(conn.Conn, func(pc *pgx.Conn) error {
					k := 0
					vals := []any{c, int64(0), "", int64(100), int64(0), int64(100), int64(1), "bench", int64(1)}
					_, err := pc.CopyFrom(ctx, pgx.Identifier{"baton", "priced_rows"},
						[]string{"contract_id", "seq", "record_id", "gross_minor", "discount_minor", "net_minor", "claim_version", "priced_by", "generation"},
						pgx.CopyFromFunc(func() ([]any, error) {
							if k == len(idx) {
								return nil, nil
							}
							seq := int64(idx[k] + 1)
							vals[1], vals[2] = seq, fmt.Sprintf("r-%d", seq)
							k++
							return vals, nil
						}))
					return err
				})
			}
			// A contract after every benchmarked one: the rows never reach
			// the index's last leaf.
			if err := copyContract("z"); err != nil {
				b.Fatal(err)
			}
			n := 0
			for b.Loop() {
				n++
				if err := copyContract(fmt.Sprintf("c-%09d", 1_000_000_000-n)); err != nil {
					b.Fatal(err)
				}
			}
			var size int64
			if err := db.QueryRowContext(ctx, `SELECT pg_relation_size('baton.priced_rows_key')`).Scan(&size); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n*rows), "ns/row")
			b.ReportMetric(float64(size)/float64((n+1)*rows), "key-bytes/row")
		})
	}
}
