package seed_test

import (
	"fmt"
	"os"

	"github.com/batonhq/baton/pricing/seed"
)

// Generating a small data set in the load format: the tiers of two
// contracts and their records, interleaved by contract. The same options
// always give the same bytes, so a benchmark or a test can regenerate its
// input instead of storing it.
func Example() {
	o := seed.Options{Contracts: 2, RecordsPerContract: 3, Seed: 42}
	if err := seed.WriteTiers(os.Stdout, o); err != nil {
		panic(err)
	}
	if err := seed.WriteRecords(os.Stdout, o, nil); err != nil {
		panic(err)
	}
	fmt.Println(o.Records(), "records for", o.ContractID(0), "and", o.ContractID(1))
	// Output:
	// contract_id,threshold_minor,discount_bp
	// c-000000,0,860
	// c-000000,1323124,2330
	// c-000001,0,270
	// contract_id,record_id,amount_minor
	// c-000000,r0,97
	// c-000001,r0,96
	// c-000000,r1,77
	// c-000001,r1,15147
	// c-000000,r2,46
	// c-000001,r2,21
	// 6 records for c-000000 and c-000001
}
