package ingest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"io"
	"os"
	osexec "os/exec"
	"path/filepath"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pglocal"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/pgxconn"
	"github.com/batonhq/baton/pricing/seed"
)

// benchRows and benchContracts size the benchmark input; override the rows
// with BATON_BENCH_ROWS (a multiple of benchContracts).
const (
	benchRows      = 200_000
	benchContracts = 1_000
)

// writeBenchFiles writes a tiers file for contracts contracts and a records
// file of rows records spread over them, as worker seed does.
func writeBenchFiles(b *testing.B, dir string, rows, contracts int) (tiers, records string) {
	b.Helper()
	o := seed.Options{Contracts: contracts, RecordsPerContract: max(1, rows/contracts), Seed: 1}
	tiers = filepath.Join(dir, "tiers.csv")
	records = filepath.Join(dir, "records.csv")
	write := func(path string, fill func(w io.Writer) error) {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		w := bufio.NewWriter(f)
		if err := fill(w); err != nil {
			b.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
	write(tiers, func(w io.Writer) error { return seed.WriteTiers(w, o) })
	write(records, func(w io.Writer) error { return seed.WriteRecords(w, o, nil) })
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

// BenchmarkLoad loads a records file shaped as worker seed writes it
// (contracts interleaved) into a database holding their tiers: load takes
// the direct copy, load_staged the staged path (the direct copy turned
// off), load_4MiB the direct copy within a memory budget of 4 MiB, far
// below the file's size (partial chunks, more reads of contracts' bases,
// the record keys past about 58,000 in buckets of a temporary file).
// load_redelivery loads the
// same file with its first record repeated at the end: the direct copy
// finds the repeat after the file and removes it from the contract's
// chunks. The baselines copy the same file into a plain table of three
// columns: copy_baseline with pgx CopyFrom, psql_copy with psql's \copy
// (skipped if psql is not installed). All report rows/s; the ratio of load
// to psql_copy is the loader's figure of merit.
func BenchmarkLoad(b *testing.B) {
	rows := benchRows
	if s := os.Getenv("BATON_BENCH_ROWS"); s != "" {
		var err error
		if rows, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	dir := b.TempDir()
	tiers, records := writeBenchFiles(b, dir, rows, benchContracts)
	redelivery := filepath.Join(dir, "redelivery.csv")
	data, err := os.ReadFile(records)
	if err != nil {
		b.Fatal(err)
	}
	first := data[len(RecordsHeader)+1:]
	first = first[:bytes.IndexByte(first, '\n')+1]
	if err := os.WriteFile(redelivery, append(data, first...), 0o644); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()

	load := func(records string, staged bool, budget int64) func(b *testing.B) {
		return func(b *testing.B) {
			b.ReportAllocs()
			var peak uint64
			for range b.N {
				b.StopTimer()
				db := pgtest.NewDB(b)
				mustLoad(b, db, Options{TiersPath: tiers})
				stop := make(chan struct{})
				p := peakHeap(stop)
				b.StartTimer()
				rep := mustLoad(b, db, Options{RecordsPath: records, staged: staged, MemoryLimit: budget})
				b.StopTimer()
				close(stop)
				peak = max(peak, p.Load())
				if rep.RecordsAccepted != int64(rows) || rep.DirectCopy == staged {
					b.Fatalf("report = %+v", rep)
				}
			}
			b.ReportMetric(float64(rows*b.N)/b.Elapsed().Seconds(), "rows/s")
			b.ReportMetric(float64(peak)/(1<<20), "peak_heap_MiB")
		}
	}
	b.Run("load", load(records, false, 0))
	b.Run("load_4MiB", load(records, false, 4<<20))
	b.Run("load_staged", load(records, true, 0))
	b.Run("load_redelivery", load(redelivery, false, 0))

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

	b.Run("psql_copy", func(b *testing.B) {
		psql := "psql"
		if dir, err := pglocal.BinDir(); err == nil {
			psql = filepath.Join(dir, "psql")
		}
		if _, err := osexec.LookPath(psql); err != nil {
			b.Skipf("no psql: %v", err)
		}
		for range b.N {
			b.StopTimer()
			url := pgtest.NewURL(b)
			db := pgtest.Open(b, url, dbconn.Options{})
			if _, err := db.ExecContext(ctx, `CREATE TABLE baseline (contract_id text, record_id text, amount_minor bigint)`); err != nil {
				b.Fatal(err)
			}
			cmd := osexec.CommandContext(ctx, psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url,
				"-c", `\copy baseline FROM '`+strings.ReplaceAll(records, "'", "''")+`' WITH (FORMAT csv, HEADER true)`)
			b.StartTimer()
			out, err := cmd.CombinedOutput()
			b.StopTimer()
			if err != nil {
				b.Fatalf("psql \\copy: %v: %s", err, out)
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
	err = pgxconn.Raw(conn.Conn, func(pc *pgx.Conn) error {
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

// BenchmarkLoadOneRecordContracts loads one record for each of 20,000
// contracts, directly and staged: the cost per contract, which a plan
// quadratic in the contracts (a join against an unanalysed staging table)
// once made 40 times what it is, against the copy_baseline of
// BenchmarkLoad for the same number of rows.
func BenchmarkLoadOneRecordContracts(b *testing.B) {
	const contracts = 20_000
	tiers, records := writeBenchFiles(b, b.TempDir(), contracts, contracts)
	for _, c := range []struct {
		name   string
		staged bool
	}{{"direct", false}, {"staged", true}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				db := pgtest.NewDB(b)
				mustLoad(b, db, Options{TiersPath: tiers})
				b.StartTimer()
				rep := mustLoad(b, db, Options{RecordsPath: records, staged: c.staged})
				b.StopTimer()
				if rep.RecordsAccepted != contracts || rep.DirectCopy == c.staged {
					b.Fatalf("report = %+v", rep)
				}
			}
			b.ReportMetric(float64(contracts*b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
