package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"

	"github.com/batonhq/baton/console"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/partition"
)

// The console of a service whose partitions are customer accounts and
// whose work items are invoices: the overview as JSON (/api/overview) and
// the list of accounts as a page (/accounts).
func Example() {
	db, done := pgtest.ExampleDB() // a database with baton's schema applied
	defer done()
	ctx := context.Background()
	if _, err := partition.NewStore(db, "").Kind("invoices").AddWorks(ctx, []partition.Work{
		{Key: "acme", N: 10}, {Key: "globex", N: 5}, {Key: "initech", N: 7},
	}); err != nil {
		panic(err)
	}

	srv, err := console.New(db, console.Config{
		Addr:     "127.0.0.1:0", // a free loopback port; the default is 127.0.0.1:8080
		Kind:     "invoices",
		Noun:     "account",
		ItemUnit: "invoices",
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	srv.Start()
	defer srv.Stop()
	get := func(path string) []byte {
		resp, err := http.Get("http://" + srv.Addr() + path)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			panic(err)
		}
		fmt.Println(path, resp.Status)
		return body
	}

	var overview struct {
		Partitions int            `json:"partitions"`
		Backlog    int64          `json:"backlog"`
		ByState    map[string]int `json:"by_state"`
	}
	if err := json.Unmarshal(get("/api/overview"), &overview); err != nil {
		panic(err)
	}
	fmt.Printf("%d accounts, %d invoices to do, by state %v\n", overview.Partitions, overview.Backlog, overview.ByState)
	page := get("/accounts")
	fmt.Printf("title %q, lists initech: %v\n", regexp.MustCompile(`<title>(.*?)</title>`).FindSubmatch(page)[1],
		bytes.Contains(page, []byte(">initech<")))
	// Output:
	// /api/overview 200 OK
	// 3 accounts, 22 invoices to do, by state map[pending:3]
	// /accounts 200 OK
	// title "Accounts · baton", lists initech: true
}
