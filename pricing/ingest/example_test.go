package ingest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/pricing/ingest"
)

// Loading a tiers file and a records file in one transaction, then
// delivering some records again with a new one, then a file with a bad
// row, which loads nothing.
func Example() {
	db, done := pgtest.ExampleDB() // a database with baton's and pricing's schema
	defer done()
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "ingest-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	file := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			panic(err)
		}
		return path
	}

	tiers := file("tiers.csv", "contract_id,threshold_minor,discount_bp\nacme,0,0\nacme,10000,500\nglobex,0,250\n")
	records := file("records.csv", "contract_id,record_id,amount_minor\nacme,a1,6000\nglobex,g1,400\nacme,a2,6000\n")
	loader := ingest.NewStore(db, "") // the pricing tables in schema baton
	r, err := loader.Load(ctx, ingest.Options{TiersPath: tiers, RecordsPath: records})
	if err != nil {
		panic(err)
	}
	fmt.Printf("load %d: %d tier rows, %d contracts created, %d records\n", r.LoadID, r.TierRows, r.ContractsCreated, r.RecordsAccepted)

	again := file("again.csv", "contract_id,record_id,amount_minor\nacme,a2,6000\nacme,a3,40000\n")
	r, err = loader.Load(ctx, ingest.Options{RecordsPath: again})
	if err != nil {
		panic(err)
	}
	fmt.Printf("load %d: %d records, %d re-delivered\n", r.LoadID, r.RecordsAccepted, r.RecordsRedelivered)

	bad := file("bad.csv", "contract_id,record_id,amount_minor\nacme,a4,100\nacme,a5,-3\ninitech,i1,100\n")
	_, err = loader.Load(ctx, ingest.Options{RecordsPath: bad})
	var invalid *ingest.InvalidInputError
	if errors.As(err, &invalid) {
		for _, e := range invalid.Errors {
			fmt.Printf("line %d: %s\n", e.Line, e.Reason)
		}
	}
	// Output:
	// load 1: 3 tier rows, 2 contracts created, 3 records
	// load 2: 1 records, 1 re-delivered
	// line 3: amount_minor -3 is out of range (must be 1 to 1000000000000)
	// line 4: unknown contract initech
}
