package lock

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
)

type benchMethod struct {
	name string
	lock func(ctx context.Context, tx bun.Tx, key string) error
}

var benchMethods = []benchMethod{
	{"row", func(ctx context.Context, tx bun.Tx, key string) error {
		return Acquire(ctx, tx, key, Options{Method: MethodRow})
	}},
	{"advisory", func(ctx context.Context, tx bun.Tx, key string) error {
		return Acquire(ctx, tx, key, Options{Method: MethodAdvisory})
	}},
	// The baseline: a row lock on an existing row, which the other two
	// methods do without needing the row.
	{"for_update", func(ctx context.Context, tx bun.Tx, key string) error {
		var one int
		return tx.QueryRowContext(ctx, `SELECT 1 FROM entities WHERE entity_key = ? FOR UPDATE`, key).Scan(&one)
	}},
}

// BenchmarkMethods measures one locked transaction (begin, lock, commit)
// with each method, interleaved in chunks within the same run, on distinct
// keys (uncontended) and with 4 goroutines on one key (contended). It
// reports each method's time per transaction, its ratio to
// SELECT ... FOR UPDATE on an existing row, and row/advisory.
func BenchmarkMethods(b *testing.B) {
	db := pgtest.Open(b, pgtest.NewURL(b), dbconn.Options{MaxOpenConns: 8})
	ctx := context.Background()
	const keys = 10000
	if _, err := db.ExecContext(ctx, `CREATE TABLE entities (entity_key text PRIMARY KEY);
		INSERT INTO entities SELECT 'E:' || i FROM generate_series(0, 9999) i`); err != nil {
		b.Fatal(err)
	}
	once := func(m benchMethod, key string) {
		err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error { return m.lock(ctx, tx, key) })
		if err != nil {
			b.Fatal(err)
		}
	}
	for _, sc := range []struct {
		name       string
		goroutines int
		key        func(i int) string
	}{
		{"uncontended", 1, func(i int) string { return fmt.Sprintf("E:%d", i%keys) }},
		{"contended", 4, func(int) string { return "E:0" }},
	} {
		b.Run(sc.name, func(b *testing.B) {
			elapsed := make([]time.Duration, len(benchMethods))
			const chunk = 50
			for done := 0; done < b.N; done += chunk {
				n := min(chunk, b.N-done)
				for mi, m := range benchMethods {
					start := time.Now()
					var wg sync.WaitGroup
					for g := range sc.goroutines {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for i := g; i < n; i += sc.goroutines {
								once(m, sc.key(done+i))
							}
						}()
					}
					wg.Wait()
					elapsed[mi] += time.Since(start)
				}
			}
			// The choice between the two general methods: row vs advisory.
			b.ReportMetric(float64(elapsed[0])/float64(elapsed[1]), "row/advisory")
			base := elapsed[len(elapsed)-1]
			for mi, m := range benchMethods {
				b.ReportMetric(float64(elapsed[mi].Nanoseconds())/float64(b.N), m.name+"-ns/tx")
				b.ReportMetric(float64(elapsed[mi])/float64(base), m.name+"/for_update")
			}
		})
	}
}
