package export_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/pricing/export"
	"github.com/batonhq/baton/pricing/ingest"
	"github.com/batonhq/baton/pricing/pricer"
)

// Exporting the priced records: WriteComplete refuses while records are
// still unpriced; once a worker has priced them, it writes the CSV.
func Example() {
	db, done := pgtest.ExampleDB() // a database with baton's and pricing's schema
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	dir, err := os.MkdirTemp("", "export-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	tiers, records := filepath.Join(dir, "tiers.csv"), filepath.Join(dir, "records.csv")
	for path, content := range map[string]string{
		tiers:   "contract_id,threshold_minor,discount_bp\nacme,0,0\nacme,10000,500\nglobex,0,5000\n",
		records: "contract_id,record_id,amount_minor\nacme,a1,6000\nglobex,g1,1\nacme,a2,6000\nglobex,g2,1\n",
	} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			panic(err)
		}
	}
	if _, err := ingest.NewStore(db, "").Load(ctx, ingest.Options{TiersPath: tiers, RecordsPath: records}); err != nil {
		panic(err)
	}

	priced := export.NewStore(db, "") // the pricing tables in schema baton
	_, err = priced.WriteComplete(ctx, io.Discard)
	var incomplete *export.IncompleteError
	if errors.As(err, &incomplete) {
		fmt.Printf("not yet: %d of %d records unpriced\n", incomplete.Progress.Unpriced, incomplete.Progress.Records)
	}

	d, err := distributor.New(db, pricer.NewStore(db, "").Processor(), distributor.Config{
		Name: "worker-1", UntilDone: true, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	if err := d.Run(ctx); err != nil {
		panic(err)
	}

	n, err := priced.WriteComplete(ctx, os.Stdout)
	if err != nil {
		panic(err)
	}
	fmt.Println(n, "rows")
	// Output:
	// not yet: 4 of 4 records unpriced
	// contract_id,record_id,gross_minor,discount_minor,net_minor
	// acme,a1,6000,0,6000
	// acme,a2,6000,100,5900
	// globex,g1,1,1,0
	// globex,g2,1,0,1
	// 4 rows
}
