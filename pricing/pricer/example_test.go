package pricer_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/pricing/ingest"
	"github.com/batonhq/baton/pricing/pricer"
	"github.com/batonhq/baton/pricing/seed"
)

// A pricing worker: the Processor run by a distributor over the contracts
// a load created, until every record is priced, then the independent SQL
// verification of what it wrote.
func Example() {
	db, done := pgtest.ExampleDB() // a database with baton's and pricing's schema
	defer done()
	ctx := context.Background()

	// Some input: 20 contracts of 50 records each, generated and loaded.
	dir, err := os.MkdirTemp("", "pricer-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	o := seed.Options{Contracts: 20, RecordsPerContract: 50, Seed: 1}
	tiers, records := filepath.Join(dir, "tiers.csv"), filepath.Join(dir, "records.csv")
	write := func(path string, gen func(io.Writer) error) {
		f, err := os.Create(path)
		if err != nil {
			panic(err)
		}
		if err := gen(f); err != nil {
			panic(err)
		}
		if err := f.Close(); err != nil {
			panic(err)
		}
	}
	write(tiers, func(w io.Writer) error { return seed.WriteTiers(w, o) })
	write(records, func(w io.Writer) error { return seed.WriteRecords(w, o, nil) })
	if _, err := ingest.NewStore(db, "").Load(ctx, ingest.Options{TiersPath: tiers, RecordsPath: records}); err != nil {
		panic(err)
	}

	tables := pricer.NewStore(db, "") // the pricing tables in schema baton
	d, err := distributor.New(db, tables.Processor(), distributor.Config{
		Name:      "worker-1",
		BatchSize: 16,
		UntilDone: true, // return once no work is left, to end the example
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := d.Run(ctx); err != nil {
		panic(err)
	}

	p, err := tables.CheckProgress(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%d contracts, %d of %d records priced, complete: %v\n", p.Contracts, p.Priced, p.Records, p.Complete())
	s, err := tables.Verify(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Printf("verified: gross %s, net %s, %d mismatches\n", s.Gross, s.Net, len(s.Mismatches))
	// Output:
	// 20 contracts, 1000 of 1000 records priced, complete: true
	// verified: gross 171993321205, net 138863618202, 0 mismatches
}
