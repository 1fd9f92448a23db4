package console_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/batonhq/baton/console"
	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
)

// A console configured with its workload's nouns speaks them and serves
// its partitions under the plural: /contracts for contracts.
func TestConfiguredNouns(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewURL(t), dbconn.Options{})
	exec(t, db, `INSERT INTO baton.tasks (partition_key, available, position) VALUES ('c-1', 10, 2), ('c-2', 4, 4)`)
	base := serve(t, db, console.Config{Noun: "contract", ItemUnit: "records"})
	code, body := get(t, base+"/contracts")
	if code != http.StatusOK {
		t.Fatalf("/contracts = %d", code)
	}
	for _, want := range []string{"<h1>Contracts</h1>", `<table id="contracts"`, `data-contract="c-1"`, ">records/s<",
		`href="/contracts/c-1"`, "2 contracts"} {
		if !strings.Contains(body, want) {
			t.Errorf("/contracts lacks %q", want)
		}
	}
	// The key column sorts as sort=contract, as it always has.
	if !strings.Contains(body, `href="/contracts?sort=contract"`) {
		t.Errorf("/contracts: the key column's sort link is not sort=contract")
	}
	_, body = get(t, base+"/contracts?sort=contract&dir=desc")
	if i, j := strings.Index(body, `data-contract="c-2"`), strings.Index(body, `data-contract="c-1"`); i < 0 || j < 0 || i > j {
		t.Errorf("sort=contract&dir=desc does not put c-2 first")
	}
	code, body = get(t, base+"/contracts/c-1")
	if code != http.StatusOK || !strings.Contains(body, "Contract <code>c-1</code>") || !strings.Contains(body, "8 records") {
		t.Errorf("/contracts/c-1 = %d, want the contract's page in records", code)
	}
	if _, body := get(t, base+"/"); !strings.Contains(body, "Contracts by state") || !strings.Contains(body, `href="/contracts?state=quarantined"`) {
		t.Errorf("the overview does not speak of contracts")
	}
	if _, body := get(t, serve(t, db, console.Config{Noun: "price list", Nouns: "price-lists"})+"/price-lists"); !strings.Contains(body, `<tr data-pricelist="c-1">`) ||
		!strings.Contains(body, "<h1>Price-lists</h1>") {
		t.Errorf("a two-word noun's table rows or title are wrong")
	}
	if code, _ := get(t, base+"/partitions"); code != http.StatusNotFound {
		t.Errorf("/partitions = %d on a console for contracts, want 404", code)
	}
	if code, body := get(t, base+"/contracts/nope"); code != http.StatusNotFound || !strings.Contains(body, `no contract &#34;nope&#34;`) {
		t.Errorf("/contracts/nope = %d %s", code, body)
	}
}

func TestNounValidation(t *testing.T) {
	for _, c := range []console.Config{{Noun: "job", Nouns: "jobs"}, {Noun: "worker"}, {Nouns: "Contracts"},
		{Noun: "price list", Nouns: "price lists"}, {Nouns: "a/b"}, {Noun: " contract"}} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: want an error", c)
		}
	}
	for _, c := range []console.Config{{Noun: "contract"}, {Noun: "price list", Nouns: "price-lists"}, {ItemUnit: "rows"}} {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
}
