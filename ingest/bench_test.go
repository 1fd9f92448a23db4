package ingest

import (
	"bufio"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/metrics"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"

	"github.com/batonhq/baton/internal/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
)

// benchRows and benchContracts size the benchmark input; override with
// BATON_BENCH_ROWS.
const (
	benchRows      = 200_000
	benchContracts = 1_000
)

// writeBenchFiles writes a tiers file for n contracts and a records file of
// rows records spread over them.
func writeBenchFiles(b *testing.B, dir string, rows, contracts int) (tiers, records string) {
	b.Helper()
	tiers = filepath.Join(dir, "tiers.csv")
	records = filepath.Join(dir, "records.csv")
	write := func(path string, fill func(w *bufio.Writer)) {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		w := bufio.NewWriter(f)
		fill(w)
		if err := w.Flush(); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
	write(tiers, func(w *bufio.Writer) {
		w.WriteString(TiersHeader + "\n")
		for c := range contracts {
			fmt.Fprintf(w, "contract-%05d,0,0\ncontract-%05d,100000,250\ncontract-%05d,1000000,500\n", c, c, c)
		}
	})
	write(records, func(w *bufio.Writer) {
		w.WriteString(RecordsHeader + "\n")
		for i := range rows {
			c := (i * 7919) % contracts
			fmt.Fprintf(w, "contract-%05d,rec-%09d-%s,%d\n", c, i, "2026-11-22T10:00:00Z", 1+(i*104729)%5_000_000)
		}
	})
	return tiers, records
}

// peakHeap samples the heap in use until stop is closed.
func peakHeap(stop <-chan struct{}) *atomic.Uint64 {
	var peak atomic.Uint64
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	go func() {
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(sample)
			if v := sample[0].Value.Uint64(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return &peak
}

// BenchmarkLoad loads a generated records file (load) and, for comparison,
// copies the same rows with a plain pgx CopyFrom into an unindexed table
// (copy_baseline). Both report rows/s.
func BenchmarkLoad(b *testing.B) {
	rows := benchRows
	if s := os.Getenv("BATON_BENCH_ROWS"); s != "" {
		var err error
		if rows, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	tiers, records := writeBenchFiles(b, b.TempDir(), rows, benchContracts)
	ctx := context.Background()

	b.Run("load", func(b *testing.B) {
		b.ReportAllocs()
		var peak uint64
		for range b.N {
			b.StopTimer()
			db := pgtest.NewDB(b)
			mustLoad(b, db, Options{TiersPath: tiers})
			stop := make(chan struct{})
			p := peakHeap(stop)
			b.StartTimer()
			rep := mustLoad(b, db, Options{RecordsPath: records})
			b.StopTimer()
			close(stop)
			peak = max(peak, p.Load())
			if rep.RecordsAccepted != int64(rows) {
				b.Fatalf("report = %+v", rep)
			}
		}
		b.ReportMetric(float64(rows*b.N)/b.Elapsed().Seconds(), "rows/s")
		b.ReportMetric(float64(peak)/(1<<20), "peak_heap_MiB")
	})

	b.Run("copy_baseline", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			b.StopTimer()
			db := pgtest.NewDB(b)
			if _, err := db.ExecContext(ctx, `CREATE TABLE baseline (contract_id text, record_id text, amount_minor bigint)`); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			n, err := copyBaseline(ctx, db, records)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			if n != int64(rows) {
				b.Fatalf("copied %d rows, want %d", n, rows)
			}
		}
		b.ReportMetric(float64(rows*b.N)/b.Elapsed().Seconds(), "rows/s")
	})
}

// copyBaseline reads the records file with encoding/csv and copies its
// rows into table baseline: the least any loader must do.
func copyBaseline(ctx context.Context, db *bun.DB, path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	r := csv.NewReader(bufio.NewReaderSize(f, 1<<16))
	r.ReuseRecord = true
	if _, err := r.Read(); err != nil { // header
		return 0, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	var n int64
	err = dbconn.Raw(conn.Conn, func(pc *pgx.Conn) error {
		vals := make([]any, 3)
		n, err = pc.CopyFrom(ctx, pgx.Identifier{"baseline"}, []string{"contract_id", "record_id", "amount_minor"},
			pgx.CopyFromFunc(func() ([]any, error) {
				rec, err := r.Read()
				if err == io.EOF {
					return nil, nil
				}
				if err != nil {
					return nil, err
				}
				amount, err := strconv.ParseInt(rec[2], 10, 64)
				if err != nil {
					return nil, err
				}
				vals[0], vals[1], vals[2] = rec[0], rec[1], amount
				return vals, nil
			}))
		return err
	})
	return n, err
}
